package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"go.yaml.in/yaml/v3"

	"github.com/flashgate/flashgate/shared/httpx"
)

// TestOpenAPIRoutes checks the proxy's routes against the OpenAPI document it
// serves: every registered route is documented as served by the proxy, and every
// operation the document says the proxy serves is registered. Handler does not
// touch the Server's dependencies while registering, so none are needed.
func TestOpenAPIRoutes(t *testing.T) {
	srv := &Server{metrics: httpx.NewMetrics("proxy"), ready: func(context.Context) error { return nil }}
	h := srv.Handler()
	documented := documentedRoutes(t, h, "proxy")
	registered := registeredRoutes(h)
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is registered but not documented for the proxy in openapi.yaml", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(registered, r) {
			t.Errorf("openapi.yaml documents %s on the proxy, but the proxy does not register it", r)
		}
	}
}

// registeredRoutes lists h's routes as "METHOD /path/{param}".
func registeredRoutes(h *gin.Engine) []string {
	param := regexp.MustCompile(`[:*](\w+)`)
	var out []string
	for _, r := range h.Routes() {
		out = append(out, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	return out
}

// documentedRoutes fetches GET /openapi.yaml from h and lists the operations whose
// x-served-by names service, as "METHOD /path/{param}".
func documentedRoutes(t *testing.T, h http.Handler, service string) []string {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /openapi.yaml = %d %s, want 200", w.Code, w.Body)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatalf("yaml.Unmarshal(openapi.yaml) = %v", err)
	}
	var out []string
	for path, item := range doc.Paths {
		for _, method := range []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"} {
			op, ok := item[method].(map[string]any)
			if !ok {
				continue
			}
			served, _ := op["x-served-by"].([]any)
			if slices.Contains(served, any(service)) {
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("openapi.yaml documents no operation served by %s", service)
	}
	return out
}
