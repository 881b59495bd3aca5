package httpxtest

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/gin-gonic/gin"
	"go.yaml.in/yaml/v3"
)

// CheckOpenAPIRoutes checks h's routes against the OpenAPI document h serves:
// every registered route is documented as served by service, and every
// operation the document says service serves is registered.
func CheckOpenAPIRoutes(tb testing.TB, h *gin.Engine, service string) {
	tb.Helper()
	documented := documentedRoutes(tb, h, service)
	registered := registeredRoutes(h)
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			tb.Errorf("route %s is registered but not documented for the %s in openapi.yaml", r, service)
		}
	}
	for _, r := range documented {
		if !slices.Contains(registered, r) {
			tb.Errorf("openapi.yaml documents %s on the %s, but the %s does not register it", r, service, service)
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
func documentedRoutes(tb testing.TB, h http.Handler, service string) []string {
	tb.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, api.OpenAPIPath, nil))
	if w.Code != http.StatusOK {
		tb.Fatalf("GET /openapi.yaml = %d %s, want 200", w.Code, w.Body)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		tb.Fatalf("yaml.Unmarshal(openapi.yaml) = %v", err)
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
		tb.Fatalf("openapi.yaml documents no operation served by %s", service)
	}
	return out
}
