package main

import (
	"testing"

	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// proxyScopes is the edge's route x scope table, written out here apart from
// the code's: a shop front (reserve) reserves and reads its reservations, a
// payment service (settle) confirms, refunds and releases, a scraper
// (metrics) reads /metrics on the client port.
var proxyScopeTable = map[string][]auth.Scope{
	"POST /vouchers/:code/reservations":                  {auth.ScopeReserve},
	"GET /vouchers/:code/reservations/:orderId":          {auth.ScopeReserve},
	"POST /vouchers/:code/reservations/:orderId/confirm": {auth.ScopeSettle},
	"POST /vouchers/:code/reservations/:orderId/refund":  {auth.ScopeSettle},
	"DELETE /vouchers/:code/reservations/:orderId":       {auth.ScopeSettle},
	"GET /metrics": {edge.ScopeMetrics},
}

// TestRouteScopes sends every route the proxy registers with a token of each
// scope it takes (PROXY_TOKENS name:token:scope), one of every scope
// (PROXY_TOKEN) and none: 403 FORBIDDEN outside the route's scopes, 401
// without a token, through otherwise (to the ledger, with the proxy's own
// token, for the routes it relays).
func TestRouteScopes(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})
	check := httpxtest.ScopeCheck{All: "edge-all", Want: proxyScopeTable, Code: newCode(t), Tokens: map[auth.Scope]string{}}
	tokens := map[string]envconf.Credential{}
	for _, sc := range proxyScopes {
		check.Tokens[auth.Scope(sc)] = "edge-" + sc
		tokens[sc+"-only"] = envconf.Credential{Token: "edge-" + sc, Scopes: []string{sc}}
	}
	srv := proxyServer(s, check.All, httpx.NewMetrics("proxy"))
	srv.Tokens = tokens
	check.Open = srv.OpenPaths() // /metrics needs a token here: no METRICS_ADDR
	httpxtest.CheckRouteScopes(t, srv.Handler(), check)
}
