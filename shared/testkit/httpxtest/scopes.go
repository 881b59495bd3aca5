package httpxtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/voucher"
)

// ScopeCheck is a service's route x scope table, checked by CheckRouteScopes.
type ScopeCheck struct {
	// Tokens holds, for each scope the service knows, a token that holds
	// that scope alone; All a token written without a scope list.
	Tokens map[auth.Scope]string
	All    string
	// Want gives each route ("METHOD pattern", as h.Routes() lists it) the
	// scopes that may call it. The open routes (api.OpenPaths) need no row.
	Want map[string][]auth.Scope
	// Code is a voucher code the requests put in the path: a fresh one, so
	// that the calls the scopes let through change nothing another test sees.
	Code string
	// Open are the service's open routes (service.Config.Open); nil:
	// api.OpenPaths.
	Open []string
}

// CheckRouteScopes sends every route h registers (h.Routes(), so that a new
// route without a row fails) without a token, with each scope's token and
// with All, and checks the statuses against Want: an open route is never 401
// or 403; any other is 401 UNAUTHORIZED without a token, 403 FORBIDDEN with a
// scope outside its row, and neither with a scope in its row or with All
// (the handler then answers what it answers: 400 for the empty body, 404 for
// the unknown voucher, ...). A row of Want that h does not register fails too.
func CheckRouteScopes(t *testing.T, h *gin.Engine, c ScopeCheck) {
	t.Helper()
	seen := map[string]bool{}
	open := c.Open
	if open == nil {
		open = api.OpenPaths
	}
	for _, r := range h.Routes() {
		key := auth.RouteKey(r.Method, r.Path)
		seen[key] = true
		path := fillRoute(r.Path, c.Code)
		if slices.Contains(open, r.Path) {
			if st, _ := scopeCall(h, r.Method, path, ""); st == http.StatusUnauthorized || st == http.StatusForbidden {
				t.Errorf("%s without a token = %d, want an open route", key, st)
			}
			continue
		}
		want, ok := c.Want[key]
		if !ok {
			t.Errorf("%s is registered but has no row in the scope table: give it its scopes", key)
			continue
		}
		if st, code := scopeCall(h, r.Method, path, ""); st != http.StatusUnauthorized || code != voucher.CodeUnauthorized {
			t.Errorf("%s without a token = %d %s, want 401 UNAUTHORIZED", key, st, code)
		}
		if st, _ := scopeCall(h, r.Method, path, c.All); st == http.StatusUnauthorized || st == http.StatusForbidden {
			t.Errorf("%s with a token of every scope = %d, want neither 401 nor 403", key, st)
		}
		for scope, token := range c.Tokens {
			st, code := scopeCall(h, r.Method, path, token)
			switch allowed := slices.Contains(want, scope); {
			case allowed && (st == http.StatusUnauthorized || st == http.StatusForbidden):
				t.Errorf("%s with scope %s = %d %s, want it let through", key, scope, st, code)
			case !allowed && (st != http.StatusForbidden || code != voucher.CodeForbidden):
				t.Errorf("%s with scope %s = %d %s, want 403 FORBIDDEN", key, scope, st, code)
			}
		}
	}
	for key := range c.Want {
		if !seen[key] {
			t.Errorf("the scope table has %s, which the service does not register", key)
		}
	}
}

// fillRoute builds a concrete path of pattern: code for :code, an order id
// and an event id for the others.
func fillRoute(pattern, code string) string {
	var values []string
	for seg := range strings.SplitSeq(pattern, "/") {
		switch seg {
		case ":" + api.ParamCode:
			values = append(values, code)
		case ":" + api.ParamOrderID:
			values = append(values, "scope-order-1")
		case ":" + api.ParamEventID:
			values = append(values, "1")
		}
	}
	return api.Fill(pattern, values...)
}

// scopeCall sends an empty JSON object to h with token (none when empty) and
// returns the status and the error code.
func scopeCall(h http.Handler, method, path, token string) (int, string) {
	req := httptest.NewRequest(method, path, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	r := Reply{Status: w.Code}
	_ = json.Unmarshal(w.Body.Bytes(), &r.Body)
	return w.Code, r.Code()
}
