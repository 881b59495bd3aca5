package httpx_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"go.yaml.in/yaml/v3"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// openAPIDoc reads shared/api's openapi.yaml from disk, as its embed does.
func openAPIDoc(t *testing.T) ([]byte, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatalf("ReadFile(openapi.yaml) = %v", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("yaml.Unmarshal(openapi.yaml) = %v", err)
	}
	return raw, doc
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operation is one method of one path, with what it inherits from its path item.
type operation struct {
	method, path string
	op           map[string]any
	params       []any // path-level then operation-level parameters
}

func (o operation) String() string { return strings.ToUpper(o.method) + " " + o.path }

func operations(t *testing.T, doc map[string]any) []operation {
	t.Helper()
	paths, ok := doc["paths"].(map[string]any)
	if !ok || len(paths) == 0 {
		t.Fatalf("openapi.yaml has no paths")
	}
	var ops []operation
	for path, item := range paths {
		item := item.(map[string]any)
		shared, _ := item["parameters"].([]any)
		for _, m := range httpMethods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			own, _ := op["parameters"].([]any)
			ops = append(ops, operation{method: m, path: path, op: op, params: append(slices.Clone(shared), own...)})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].String() < ops[j].String() })
	return ops
}

// resolve follows local $refs ("#/components/...") until it reaches a node
// that is not one.
func resolve(t *testing.T, doc map[string]any, node any) any {
	t.Helper()
	for range 10 {
		m, ok := node.(map[string]any)
		if !ok {
			return node
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return node
		}
		if !strings.HasPrefix(ref, "#/") {
			t.Fatalf("$ref %q is not local", ref)
		}
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			cm, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("$ref %q does not resolve", ref)
			}
			if cur, ok = cm[part]; !ok {
				t.Fatalf("$ref %q does not resolve (no %q)", ref, part)
			}
		}
		node = cur
	}
	t.Fatalf("$ref chain too long at %v", node)
	return nil
}

// checkRefs fails on any $ref anywhere in node that does not resolve.
func checkRefs(t *testing.T, doc map[string]any, node any) {
	t.Helper()
	switch n := node.(type) {
	case map[string]any:
		if _, ok := n["$ref"]; ok {
			resolve(t, doc, n)
		}
		for _, v := range n {
			checkRefs(t, doc, v)
		}
	case []any:
		for _, v := range n {
			checkRefs(t, doc, v)
		}
	}
}

// errorCodes returns the values a schema allows for an error body's "error"
// field, and whether it constrains them at all. allOf intersects.
func errorCodes(t *testing.T, doc map[string]any, schema any) (codes []string, constrained bool) {
	t.Helper()
	s, _ := resolve(t, doc, schema).(map[string]any)
	if props, ok := s["properties"].(map[string]any); ok {
		if e, ok := props["error"]; ok {
			if enum, ok := resolve(t, doc, e).(map[string]any)["enum"].([]any); ok {
				for _, v := range enum {
					codes = append(codes, fmt.Sprint(v))
				}
				constrained = true
			}
		}
	}
	all, _ := s["allOf"].([]any)
	for _, sub := range all {
		sc, ok := errorCodes(t, doc, sub)
		if !ok {
			continue
		}
		if !constrained {
			codes, constrained = sc, true
			continue
		}
		codes = slices.DeleteFunc(codes, func(c string) bool { return !slices.Contains(sc, c) })
	}
	return codes, constrained
}

// allCodes are the error codes the services answer with.
var allCodes = []string{
	voucher.CodeInvalidRequest, voucher.CodeUnauthorized, voucher.CodeForbidden, voucher.CodeVoucherExists, voucher.CodeVoucherNotFound,
	voucher.CodeOutOfStock, voucher.CodeAlreadyUsed, voucher.CodeOrderConflict, voucher.CodeReservationReleased,
	voucher.CodeNotEligible, voucher.CodeReservationExpired, voucher.CodeReservationNotFound,
	voucher.CodeAlreadyConfirmed, voucher.CodeNotConfirmed, voucher.CodeReservationRefunded, voucher.CodeLimitBelowUsed,
	voucher.CodeNotFound, voucher.CodeMethodNotAllowed, voucher.CodeUnavailable,
	voucher.CodeCheckoutTokenRequired, voucher.CodeCheckoutTokenInvalid, voucher.CodeCheckoutTokenUnconfigured,
	voucher.CodeRateLimited, voucher.CodeWritePathLive,
}

// TestOpenAPIDocument checks openapi.yaml against itself and against the code:
// version 3.1, resolvable refs, a service and an id on every operation, no
// token exactly on api.OpenPaths, path parameters with the README's
// patterns, and every error response's codes mapping to its status.
func TestOpenAPIDocument(t *testing.T) {
	_, doc := openAPIDoc(t)
	if v, _ := doc["openapi"].(string); !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(v) {
		t.Fatalf("openapi = %q, want 3.1.x", v)
	}
	checkRefs(t, doc, doc)

	var enum []string
	for _, v := range resolve(t, doc, map[string]any{"$ref": "#/components/schemas/ErrorCode"}).(map[string]any)["enum"].([]any) {
		enum = append(enum, fmt.Sprint(v))
	}
	if !sameSet(enum, allCodes) {
		t.Errorf("ErrorCode enum = %v, want %v", enum, allCodes)
	}

	patterns := map[string]string{"code": `^[A-Za-z0-9_-]{1,32}$`, "orderId": `^[A-Za-z0-9_.:-]{1,64}$`,
		"id": `^[1-9][0-9]{0,18}$`} // an event's id
	topSecurity := doc["security"]
	ids := map[string]string{}
	for _, o := range operations(t, doc) {
		id, _ := o.op["operationId"].(string)
		if id == "" || ids[id] != "" {
			t.Errorf("%v: operationId %q missing or shared with %s", o, id, ids[id])
		}
		ids[id] = o.String()

		served, _ := o.op["x-served-by"].([]any)
		if len(served) == 0 {
			t.Errorf("%v: no x-served-by", o)
		}
		for _, s := range served {
			if s != "proxy" && s != "ledger" {
				t.Errorf("%v: x-served-by %v, want proxy and/or ledger", o, s)
			}
		}

		security, own := o.op["security"]
		if !own {
			security = topSecurity
		}
		open := slices.Contains(api.OpenPaths, o.path)
		if list, _ := security.([]any); open != (len(list) == 0) {
			t.Errorf("%v: security %v, want none exactly on api.OpenPaths %v", o, security, api.OpenPaths)
		}
		responses, _ := o.op["responses"].(map[string]any)
		// Auth answers every route that takes a token: 401 without one, 403
		// with one that lacks the route's scopes (a generated client that
		// meets an undeclared status has no type to decode it into).
		for _, st := range []string{"401", "403"} {
			if _, ok := responses[st]; !open && !ok {
				t.Errorf("%v: takes a token but does not declare its %s", o, st)
			}
		}

		declared := map[string]bool{}
		for _, p := range o.params {
			p := resolve(t, doc, p).(map[string]any)
			if p["in"] != "path" {
				continue
			}
			name := fmt.Sprint(p["name"])
			declared[name] = true
			schema := resolve(t, doc, p["schema"]).(map[string]any)
			if p["required"] != true || schema["pattern"] != patterns[name] {
				t.Errorf("%v: path parameter %s: required %v, pattern %v, want required and %s",
					o, name, p["required"], schema["pattern"], patterns[name])
			}
		}
		for _, m := range regexp.MustCompile(`\{(\w+)\}`).FindAllStringSubmatch(o.path, -1) {
			if !declared[m[1]] {
				t.Errorf("%v: path parameter %s not declared", o, m[1])
			}
		}

		if len(responses) == 0 {
			t.Errorf("%v: no responses", o)
		}
		for status, r := range responses {
			checkResponse(t, doc, o, status, resolve(t, doc, r).(map[string]any))
		}
	}
}

func checkResponse(t *testing.T, doc map[string]any, o operation, status string, r map[string]any) {
	t.Helper()
	code, err := strconv.Atoi(status)
	if err != nil {
		t.Errorf("%v: response %q is not a status code", o, status)
		return
	}
	if code == http.StatusServiceUnavailable {
		if headers, _ := r["headers"].(map[string]any); headers[api.HeaderRetryAfter] == nil {
			t.Errorf("%v: 503 without a Retry-After header", o)
		}
	}
	if code < 400 {
		return
	}
	content, _ := r["content"].(map[string]any)
	media, _ := content["application/json"].(map[string]any)
	// A named schema whose error is a named enum: generated clients get a
	// type of the codes to switch on (an allOf or a const gives them any).
	schema, _ := media["schema"].(map[string]any)
	named, _ := schema["$ref"].(string)
	props, _ := resolve(t, doc, schema).(map[string]any)["properties"].(map[string]any)
	errRef, _ := props["error"].(map[string]any)["$ref"].(string)
	if !strings.HasPrefix(named, "#/components/schemas/") || !strings.HasPrefix(errRef, "#/components/schemas/") {
		t.Errorf("%v: %d response schema %q with error %q, want a named schema whose error is a named enum", o, code, named, errRef)
	}
	codes, constrained := errorCodes(t, doc, media["schema"])
	if !constrained || len(codes) == 0 {
		t.Errorf("%v: %d response does not name its error codes", o, code)
		return
	}
	for _, c := range codes {
		if s := httpx.Status(c); s != code || !slices.Contains(allCodes, c) {
			t.Errorf("%v: %d response lists %s, which is answered %d", o, code, c, s)
		}
	}
}

// TestOpenAPIValid loads openapi.yaml with kin-openapi and validates it (the
// document test above checks it against the code; this one against the
// OpenAPI specification, as adopting teams' tools read it), and checks that
// no schema uses const or allOf to narrow a type, which generators turn into
// untyped values.
func TestOpenAPIValid(t *testing.T) {
	httpxtest.LoadOpenAPI(t)
	raw, _ := openAPIDoc(t)
	for i, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "const:") || strings.Contains(line, "- properties:") {
			t.Errorf("openapi.yaml:%d: %q: use a named enum schema instead", i+1, strings.TrimSpace(line))
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b))
	return slices.Equal(a, b)
}

// TestServeOpenAPI checks that GET /openapi.yaml serves the file, as YAML, with
// no token even when auth is on.
func TestServeOpenAPI(t *testing.T) {
	raw, _ := openAPIDoc(t)
	r := httpx.NewEngine(nil)
	r.Use(auth.Auth(map[string]envconf.Credential{auth.DefaultActor: {Token: "secret"}}, nil, api.OpenPaths...))
	httpx.ServeOpenAPI(r)
	r.GET("/closed", func(c *gin.Context) { c.Status(http.StatusNoContent) })

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /openapi.yaml = %d %s, want 200", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("GET /openapi.yaml Content-Type = %q, want application/yaml", ct)
	}
	if w.Body.String() != string(raw) {
		t.Errorf("GET /openapi.yaml served %d bytes, want openapi.yaml's %d", w.Body.Len(), len(raw))
	}

	// The same engine refuses a closed route without the token: /openapi.yaml
	// was open because it is one of api.OpenPaths, not because auth was off.
	w = httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/closed", nil))
	if w.Code != http.StatusUnauthorized {
		t.Errorf("GET /closed without a token = %d, want 401", w.Code)
	}
}
