#!/usr/bin/env bash
# deps.sh checks for what the tests, the demo and the load harness run: redis-server and
# redis-cli, the PostgreSQL server (initdb, postgres), Go >= 1.26, curl and openssl (README's
# walk-through, which a test runs), and wrk (the light load
# generator of `loadtest compare`; without it compare falls back to vegeta). On Debian or
# Ubuntu, as root, it installs missing packages with apt-get; otherwise it says what to run.
set -euo pipefail

go_min_major=1
go_min_minor=26
pg_lib=/usr/lib/postgresql

# pg_bindir prints the directory holding initdb and postgres: PATH first, else the
# highest version under /usr/lib/postgresql (Debian keeps them out of PATH).
pg_bindir() {
	local initdb postgres dir
	initdb=$(command -v initdb || true)
	postgres=$(command -v postgres || true)
	if [[ -n $initdb && -n $postgres ]]; then
		dirname "$postgres"
		return 0
	fi
	for dir in $(ls -d "$pg_lib"/*/bin 2>/dev/null | sort -t/ -k5,5 -V -r); do
		if [[ -x $dir/initdb && -x $dir/postgres ]]; then
			echo "$dir"
			return 0
		fi
	done
	return 1
}

# missing_packages prints the Debian packages that would provide what is missing.
missing_packages() {
	local pkgs=()
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		pkgs+=(redis-server)
	fi
	if ! pg_bindir >/dev/null; then
		pkgs+=(postgresql)
	fi
	# README's walk-through (which make test runs) uses curl, and openssl to mint a checkout token.
	local tool
	for tool in curl openssl; do
		command -v "$tool" >/dev/null || pkgs+=("$tool")
	done
	echo "${pkgs[@]+"${pkgs[@]}"}"
}

check_go() {
	if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
		PATH=/usr/local/go/bin:$PATH
	fi
	if ! command -v go >/dev/null; then
		echo "deps: go not found; install Go ${go_min_major}.${go_min_minor} or newer (https://go.dev/dl/) and put its bin (e.g. /usr/local/go/bin) in PATH" >&2
		return 1
	fi
	local version major minor
	version=$(GOTOOLCHAIN=local go env GOVERSION)
	if [[ $version =~ ^go([0-9]+)\.([0-9]+) ]]; then
		major=${BASH_REMATCH[1]}
		minor=${BASH_REMATCH[2]}
	else
		echo "deps: cannot read the Go version from '$version'" >&2
		return 1
	fi
	if ((major < go_min_major || (major == go_min_major && minor < go_min_minor))); then
		echo "deps: $(command -v go) is $version; flashgate needs Go ${go_min_major}.${go_min_minor} or newer (https://go.dev/dl/)" >&2
		return 1
	fi
	echo "$version"
}

# check_wrk installs wrk as root with apt-get when it is missing; otherwise it only says
# what to run: compare then measures with vegeta, so nothing else needs wrk.
check_wrk() {
	if command -v wrk >/dev/null; then
		return 0
	fi
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "deps: installing wrk" >&2
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk >&2 || true
	fi
	if ! command -v wrk >/dev/null; then
		echo "deps: wrk not found: bin/loadtest compare falls back to vegeta (heavier: ratios nearer 1)" >&2
		echo "deps: run: sudo apt-get install -y wrk" >&2
	fi
}

main() {
	local go_version missing
	go_version=$(check_go) || exit 1

	missing=$(missing_packages)
	if [[ -n $missing ]]; then
		if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
			echo "deps: installing $missing" >&2
			apt-get update -qq
			# shellcheck disable=SC2086 # one word per package
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
			missing=$(missing_packages)
			if [[ -n $missing ]]; then
				echo "deps: still missing after apt-get install: $missing" >&2
				exit 1
			fi
		else
			echo "deps: missing $missing (redis-server and redis-cli; initdb and postgres in PATH or $pg_lib/*/bin; curl; openssl)" >&2
			echo "deps: run: sudo apt-get install -y $missing" >&2
			exit 1
		fi
	fi

	check_wrk

	local redis_version pg_version
	redis_version=$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
	pg_version=$("$(pg_bindir)/postgres" --version | sed -n 's/^postgres (PostgreSQL) \([0-9.]*\).*/\1/p')
	echo "deps: ok (redis-server $redis_version, postgres $pg_version in $(pg_bindir), $go_version, wrk $(command -v wrk || echo missing))"
}

main "$@"
