package web_test

import (
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// ledgerScopes is the ledger's route x scope table, written out here apart
// from the code's so that a change to either shows. A proxy's token
// (internal) reaches the terms, warmup, the /internal routes and the
// reservation routes it relays; read and write split the admin routes.
var ledgerScopes = map[string][]httpx.Scope{
	"POST /vouchers/:code/reservations":                  {httpx.ScopeReserve, httpx.ScopeInternal},
	"GET /vouchers/:code/reservations/:orderId":          {httpx.ScopeReserve, httpx.ScopeInternal},
	"POST /vouchers/:code/reservations/:orderId/confirm": {httpx.ScopeSettle, httpx.ScopeInternal},
	"POST /vouchers/:code/reservations/:orderId/refund":  {httpx.ScopeSettle, httpx.ScopeInternal},
	"DELETE /vouchers/:code/reservations/:orderId":       {httpx.ScopeSettle, httpx.ScopeInternal},

	"GET /admin/vouchers":                                  {httpx.ScopeRead},
	"GET /admin/vouchers/:code":                            {httpx.ScopeRead, httpx.ScopeInternal},
	"GET /admin/vouchers/:code/reservations":               {httpx.ScopeRead},
	"GET /admin/vouchers/:code/reservations.csv":           {httpx.ScopeRead},
	"GET /admin/vouchers/:code/audit":                      {httpx.ScopeRead},
	"GET /admin/events":                                    {httpx.ScopeRead},
	"POST /admin/vouchers":                                 {httpx.ScopeWrite},
	"PATCH /admin/vouchers/:code":                          {httpx.ScopeWrite},
	"POST /admin/vouchers/:code/pause":                     {httpx.ScopeWrite},
	"POST /admin/vouchers/:code/resume":                    {httpx.ScopeWrite},
	"POST /admin/vouchers/:code/warmup":                    {httpx.ScopeWrite, httpx.ScopeInternal},
	"POST /admin/vouchers/:code/reconcile":                 {httpx.ScopeWrite},
	"POST /admin/events/:id/retry":                         {httpx.ScopeWrite},
	"GET /admin/admissions/failed":                         {httpx.ScopeRead},
	"GET /admin/admissions/lag":                            {httpx.ScopeRead},
	"POST /admin/admissions/failed/:code/:orderId/replay":  {httpx.ScopeWrite},
	"POST /admin/admissions/failed/:code/:orderId/discard": {httpx.ScopeWrite},
	"POST /internal/vouchers/:code/reservations":           {httpx.ScopeInternal},
	"POST /internal/vouchers/:code/reservations/batch":     {httpx.ScopeInternal},
	"POST /internal/vouchers/:code/unsettled":              {httpx.ScopeInternal},
	"GET /internal/settings":                               {httpx.ScopeInternal},
	"GET /internal/voucher-codes":                          {httpx.ScopeInternal},
}

// TestRouteScopes sends every route the ledger registers with a token of
// each scope (LEDGER_TOKENS name:token:scope), one of every scope
// (LEDGER_TOKEN) and none: 403 FORBIDDEN outside the route's scopes, 401
// without a token, through otherwise. The voucher code is fresh: what gets
// through changes nothing (empty bodies, an unknown voucher).
func TestRouteScopes(t *testing.T) {
	l := ledgertest.New(t, ledgertest.Options{Token: "scope-all"})
	check := httpxtest.ScopeCheck{All: l.Token, Want: ledgerScopes, Code: ledgertest.NewCode(t), Tokens: map[httpx.Scope]string{}}
	tokens := map[string]envconf.Credential{}
	for _, sc := range httpx.Scopes {
		check.Tokens[httpx.Scope(sc)] = "scope-" + sc
		tokens[sc+"-only"] = envconf.Credential{Token: "scope-" + sc, Scopes: []string{sc}}
	}
	h := l.Handler(func(s *web.Server) { s.Tokens = tokens })
	httpxtest.CheckRouteScopes(t, h.(*gin.Engine), check)
}
