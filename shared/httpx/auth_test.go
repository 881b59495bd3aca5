package httpx_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/httpx"
)

// TestAuthNamesTheActor checks that each named token passes and puts its name
// on the request, that a wrong or missing token is 401, that open paths need
// none, and that without tokens every request passes as AnonymousActor.
func TestAuthNamesTheActor(t *testing.T) {
	serve := func(tokens map[string]string) *gin.Engine {
		r := httpx.NewEngine(nil)
		r.Use(httpx.Auth(tokens, "/open"))
		r.GET("/who", func(c *gin.Context) { c.String(http.StatusOK, httpx.ActorFrom(c)) })
		r.GET("/open", func(c *gin.Context) { c.String(http.StatusOK, httpx.ActorFrom(c)) })
		return r
	}
	get := func(r *gin.Engine, path, auth string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	r := serve(map[string]string{httpx.DefaultActor: "t0", "alice": "ta", "bob": "tb"})
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
		st, body := get(r, tt.path, tt.auth)
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
	if st, body := get(serve(nil), "/who", ""); st != 200 || body != httpx.AnonymousActor {
		t.Errorf("GET /who without auth = %d %q, want 200 %q", st, body, httpx.AnonymousActor)
	}
}
