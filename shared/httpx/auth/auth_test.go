package auth_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
)

// authRoutes are the scopes of the routes authEngine serves.
var authRoutes = auth.RouteScopes{
	"GET /who":    {auth.ScopeRead},
	"POST /who":   {auth.ScopeWrite, auth.ScopeInternal},
	"GET /settle": {auth.ScopeSettle},
}

// authEngine serves /who (GET and POST), /settle, /unscoped (registered
// without scopes) and /open, each answering the request's actor.
func authEngine(tokens map[string]envconf.Credential) *gin.Engine {
	r := httpx.NewEngine(nil)
	r.Use(auth.Auth(tokens, authRoutes, "/open"))
	actor := func(c *gin.Context) { c.String(http.StatusOK, auth.ActorFrom(c)) }
	for _, p := range []string{"/who", "/settle", "/unscoped", "/open"} {
		r.GET(p, actor)
	}
	r.POST("/who", actor)
	return r
}

func call(r *gin.Engine, method, path, auth string) (int, string) {
	req := httptest.NewRequest(method, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

// TestAuthNamesTheActor checks that each named token passes and puts its name
// on the request, that a wrong or missing token is 401, that open paths need
// none, and that without tokens every request passes as AnonymousActor.
func TestAuthNamesTheActor(t *testing.T) {
	r := authEngine(map[string]envconf.Credential{auth.DefaultActor: {Token: "t0"}, "alice": {Token: "ta"}, "bob": {Token: "tb"}})
	for _, tt := range []struct {
		path, auth string
		status     int
		actor      string
	}{
		{"/who", "Bearer t0", 200, "default"},
		{"/who", "Bearer ta", 200, "alice"},
		{"/who", "Bearer tb", 200, "bob"},
		{"/who", "Bearer tc", 401, ""},
		{"/who", "Bearer ta ", 401, ""},
		{"/who", "bearer ta", 401, ""},
		{"/who", "", 401, ""},
		{"/open", "", 200, ""},
	} {
		st, body := call(r, http.MethodGet, tt.path, tt.auth)
		if st != tt.status || (st == 200 && body != tt.actor) {
			t.Errorf("GET %s with %q = %d %q, want %d %q", tt.path, tt.auth, st, body, tt.status, tt.actor)
		}
	}
	// RFC 9110/6750: a 401 names the scheme it wants.
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/who", nil))
	if got := w.Header().Get("WWW-Authenticate"); w.Code != 401 || got != "Bearer" {
		t.Errorf("GET /who without a token = %d with WWW-Authenticate %q, want 401 with Bearer", w.Code, got)
	}
	if st, body := call(authEngine(nil), http.MethodGet, "/who", ""); st != 200 || body != auth.AnonymousActor {
		t.Errorf("GET /who without auth = %d %q, want 200 %q", st, body, auth.AnonymousActor)
	}
}

// TestAuthScopes checks that a token with a scope list reaches only the
// routes that take one of its scopes (403 FORBIDDEN elsewhere), that a token
// without a list reaches every scoped route, that a route given no scopes is
// refused to every token, that an unknown token stays 401 whatever the route,
// and that a path matching no route is a 404 once the token is known.
func TestAuthScopes(t *testing.T) {
	r := authEngine(map[string]envconf.Credential{
		"all":      {Token: "t-all"},
		"reader":   {Token: "t-read", Scopes: []string{"read"}},
		"proxy":    {Token: "t-int", Scopes: []string{"internal"}},
		"payments": {Token: "t-pay", Scopes: []string{"settle", "reserve"}},
	})
	for _, tt := range []struct {
		method, path, token string
		status              int
	}{
		{"GET", "/who", "t-all", 200},
		{"POST", "/who", "t-all", 200},
		{"GET", "/settle", "t-all", 200},
		{"GET", "/unscoped", "t-all", 403},
		{"GET", "/who", "t-read", 200},
		{"POST", "/who", "t-read", 403},
		{"GET", "/settle", "t-read", 403},
		{"GET", "/who", "t-int", 403},
		{"POST", "/who", "t-int", 200},
		{"GET", "/settle", "t-pay", 200},
		{"GET", "/who", "t-pay", 403},
		{"GET", "/unscoped", "t-pay", 403},
		{"GET", "/who", "t-none", 401},
		{"GET", "/unscoped", "", 401},
		{"GET", "/nowhere", "t-pay", 404},
		{"GET", "/nowhere", "", 401},
		{"GET", "/open", "", 200},
	} {
		auth := ""
		if tt.token != "" {
			auth = "Bearer " + tt.token
		}
		st, body := call(r, tt.method, tt.path, auth)
		if st != tt.status {
			t.Errorf("%s %s with %q = %d %s, want %d", tt.method, tt.path, tt.token, st, body, tt.status)
		}
		if st == http.StatusForbidden && !regexpForbidden.MatchString(body) {
			t.Errorf("%s %s with %q = 403 %s, want the code FORBIDDEN", tt.method, tt.path, tt.token, body)
		}
	}
}

var regexpForbidden = regexp.MustCompile(`"error":"FORBIDDEN"`)
