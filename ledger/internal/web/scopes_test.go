package web_test

import (
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx/auth"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// ledgerScopes is the ledger's route x scope table, written out here apart
// from the code's so that a change to either shows. A proxy's token
// (internal) reaches the terms, warmup, the /internal routes and the
// reservation routes it relays; read and write split the admin routes.
var ledgerScopes = map[string][]auth.Scope{
	"POST /vouchers/:code/reservations":                  {auth.ScopeReserve, auth.ScopeInternal},
	"GET /vouchers/:code/reservations/:orderId":          {auth.ScopeReserve, auth.ScopeInternal},
	"POST /vouchers/:code/reservations/:orderId/confirm": {auth.ScopeSettle, auth.ScopeInternal},
	"POST /vouchers/:code/reservations/:orderId/refund":  {auth.ScopeSettle, auth.ScopeInternal},
	"DELETE /vouchers/:code/reservations/:orderId":       {auth.ScopeSettle, auth.ScopeInternal},

	"GET /admin/vouchers":                                  {auth.ScopeRead},
	"GET /admin/vouchers/:code":                            {auth.ScopeRead, auth.ScopeInternal},
	"GET /admin/vouchers/:code/reservations":               {auth.ScopeRead},
	"GET /admin/vouchers/:code/reservations.csv":           {auth.ScopeRead},
	"GET /admin/vouchers/:code/audit":                      {auth.ScopeRead},
	"GET /admin/events":                                    {auth.ScopeRead},
	"POST /admin/vouchers":                                 {auth.ScopeWrite},
	"PATCH /admin/vouchers/:code":                          {auth.ScopeWrite},
	"POST /admin/vouchers/:code/pause":                     {auth.ScopeWrite},
	"POST /admin/vouchers/:code/resume":                    {auth.ScopeWrite},
	"POST /admin/vouchers/:code/warmup":                    {auth.ScopeWrite, auth.ScopeInternal},
	"POST /admin/vouchers/:code/reconcile":                 {auth.ScopeWrite},
	"POST /admin/events/:id/retry":                         {auth.ScopeWrite},
	"GET /admin/admissions/failed":                         {auth.ScopeRead},
	"GET /admin/admissions/lag":                            {auth.ScopeRead},
	"POST /admin/admissions/failed/:code/:orderId/replay":  {auth.ScopeWrite},
	"POST /admin/admissions/failed/:code/:orderId/discard": {auth.ScopeWrite},
	"POST /internal/vouchers/:code/reservations":           {auth.ScopeInternal},
	"POST /internal/vouchers/:code/reservations/batch":     {auth.ScopeInternal},
	"POST /internal/vouchers/:code/unsettled":              {auth.ScopeInternal},
	"GET /internal/settings":                               {auth.ScopeInternal},
	"GET /internal/voucher-codes":                          {auth.ScopeInternal},
}

// TestRouteScopes sends every route the ledger registers with a token of
// each scope (LEDGER_TOKENS name:token:scope), one of every scope
// (LEDGER_TOKEN) and none: 403 FORBIDDEN outside the route's scopes, 401
// without a token, through otherwise. The voucher code is fresh: what gets
// through changes nothing (empty bodies, an unknown voucher).
func TestRouteScopes(t *testing.T) {
	l := ledgertest.New(t, ledgertest.Options{Token: "scope-all"})
	check := httpxtest.ScopeCheck{All: l.Token, Want: ledgerScopes, Code: ledgertest.NewCode(t), Tokens: map[auth.Scope]string{}}
	tokens := map[string]envconf.Credential{}
	for _, sc := range auth.Scopes {
		check.Tokens[auth.Scope(sc)] = "scope-" + sc
		tokens[sc+"-only"] = envconf.Credential{Token: "scope-" + sc, Scopes: []string{sc}}
	}
	h := l.Handler(func(s *web.Server) { s.Tokens = tokens })
	httpxtest.CheckRouteScopes(t, h.(*gin.Engine), check)
}
