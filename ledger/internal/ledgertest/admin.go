package ledgertest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/ledger/internal/web"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/voucher"
)

// adminTokens are the named tokens of NewAdmin, beside its LEDGER_TOKEN.
var adminTokens = map[string]string{"alice": "alice-token", "bob": "bob-token"}

// NewAdmin is New served with LEDGER_TOKEN "default-token"
// and LEDGER_TOKENS alice and bob (adminTokens), as the ledger wires them.
func NewAdmin(tb testing.TB) *Ledger {
	tb.Helper()
	l := New(tb, Options{Token: "default-token"})
	hs := httptest.NewServer(l.Handler(func(s *web.Server) {
		s.Tokens = map[string]envconf.Credential{}
		for name, token := range adminTokens {
			s.Tokens[name] = envconf.Credential{Token: token} // every scope
		}
	}))
	tb.Cleanup(hs.Close)
	l.URL = hs.URL
	return l
}

// CallAs sends a request with the named token of actor (adminTokens), or
// LEDGER_TOKEN for "default".
func (l *Ledger) CallAs(tb testing.TB, actor, method, path string, body any) Reply {
	tb.Helper()
	token := adminTokens[actor]
	if actor == "default" {
		token = l.Token
	}
	return Call(tb, method, l.URL+path, token, body)
}

// View decodes a voucher view reply, requiring status want.
func View(tb testing.TB, r Reply, want int) voucher.Voucher {
	tb.Helper()
	require.Equal(tb, want, r.Status, "reply %s", r.Raw)
	var v voucher.Voucher
	require.NoError(tb, json.Unmarshal([]byte(r.Raw), &v))
	return v
}

// Patch sends PATCH /admin/vouchers/{code}.
func (l *Ledger) Patch(tb testing.TB, code string, body any) Reply {
	tb.Helper()
	return l.Call(tb, http.MethodPatch, "/admin/vouchers/"+code, body)
}

// Reserve reserves through the ledger's public route (the gate first for a
// flash voucher, as through a proxy).
func (l *Ledger) Reserve(tb testing.TB, code string, customer int64, order string, amount int64) Reply {
	tb.Helper()
	return l.Call(tb, http.MethodPost, "/vouchers/"+code+"/reservations", ClaimBody(customer, order, amount))
}

// AuditEvents reads GET /admin/vouchers/{code}/audit.
func (l *Ledger) AuditEvents(tb testing.TB, code string) []store.AuditEvent {
	tb.Helper()
	r := l.Call(tb, http.MethodGet, "/admin/vouchers/"+code+"/audit", nil)
	require.Equal(tb, http.StatusOK, r.Status, r.Raw)
	var body struct {
		Events []store.AuditEvent `json:"events"`
	}
	require.NoError(tb, json.Unmarshal([]byte(r.Raw), &body))
	return body.Events
}

// Exec runs SQL on the test database.
func (l *Ledger) Exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	_, err := l.Pool.Exec(context.Background(), sql, args...)
	require.NoError(tb, err, sql)
}
