#!/usr/bin/env bash
# spec.sh: `make spec`. Generates a Go client from shared/api/openapi.yaml with
# ogen and with oapi-codegen into a temporary directory and fails when either
# refuses the document: the spec is the contract other teams generate their
# clients from, and a generator is stricter than a validator (ogen refused a
# 200 whose oneOf variants overlapped, which kin-openapi's loader accepted).
# Both generators are `tool` dependencies of their own module, internal/tools,
# so the main go.mod carries none of their dependencies; `go tool` caches
# their binaries, so a warm run costs the generation alone.
set -euo pipefail
: "${GO:=go}"
root=$(cd "$(dirname "$0")/.." && pwd)
spec=$root/shared/api/openapi.yaml
out=$(mktemp -d -t flashgate-spec-XXXXXX)
trap 'rm -rf "$out"' EXIT
cd "$root/internal/tools"
# Built once, one after the other (two concurrent builds of a cold cache
# fight for the same two cores), then run side by side.
$GO build -o "$out/bin/" github.com/ogen-go/ogen/cmd/ogen github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen
cat >"$out/oapi-codegen.yaml" <<CFG
package: flashgateclient
generate: {models: true, client: true}
output: $out/oapi-codegen/client.gen.go
CFG
mkdir -p "$out/oapi-codegen"
"$out/bin/ogen" --target "$out/ogen" --package flashgateclient --clean "$spec" >"$out/ogen.log" 2>&1 &
ogen=$!
"$out/bin/oapi-codegen" -config "$out/oapi-codegen.yaml" "$spec" >"$out/oapi-codegen.log" 2>&1 &
oapi=$!
rc=0
if ! wait $ogen; then
	grep -v -E '^(WARN|INFO)' "$out/ogen.log" >&2
	echo "spec: ogen refused shared/api/openapi.yaml" >&2
	rc=1
fi
if ! wait $oapi; then
	cat "$out/oapi-codegen.log" >&2
	echo "spec: oapi-codegen refused shared/api/openapi.yaml" >&2
	rc=1
fi
if ((rc == 0)); then
	echo "spec: ogen and oapi-codegen generate clients from shared/api/openapi.yaml"
fi
exit $rc
