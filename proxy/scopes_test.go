package main

import (
	"testing"

	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// proxyScopes is the edge's route x scope table, written out here apart from
// the code's: a shop front (reserve) reserves and reads its reservations, a
// payment service (settle) confirms, refunds and releases, a scraper
// (metrics) reads /metrics on the client port.
var proxyScopeTable = map[string][]httpx.Scope{
	"POST /vouchers/:code/reservations":                  {httpx.ScopeReserve},
	"GET /vouchers/:code/reservations/:orderId":          {httpx.ScopeReserve},
	"POST /vouchers/:code/reservations/:orderId/confirm": {httpx.ScopeSettle},
	"POST /vouchers/:code/reservations/:orderId/refund":  {httpx.ScopeSettle},
	"DELETE /vouchers/:code/reservations/:orderId":       {httpx.ScopeSettle},
	"GET /metrics": {edge.ScopeMetrics},
}

// TestRouteScopes sends every route the proxy registers with a token of each
// scope it takes (PROXY_TOKENS name:token:scope), one of every scope
// (PROXY_TOKEN) and none: 403 FORBIDDEN outside the route's scopes, 401
// without a token, through otherwise (to the ledger, with the proxy's own
// token, for the routes it relays).
func TestRouteScopes(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})
	check := httpxtest.ScopeCheck{All: "edge-all", Want: proxyScopeTable, Code: newCode(t), Tokens: map[httpx.Scope]string{}}
	tokens := map[string]envconf.Credential{}
	for _, sc := range proxyScopes {
		check.Tokens[httpx.Scope(sc)] = "edge-" + sc
		tokens[sc+"-only"] = envconf.Credential{Token: "edge-" + sc, Scopes: []string{sc}}
	}
	srv := proxyServer(s, check.All, httpx.NewMetrics("proxy"))
	srv.Tokens = tokens
	check.Open = srv.OpenPaths() // /metrics needs a token here: no METRICS_ADDR
	httpxtest.CheckRouteScopes(t, srv.Handler(), check)
}
