package web_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
)

// TestMetricsScheduledCodes: /metrics, which answers without a token, names
// the live flash vouchers the reconciler saw but not a scheduled one: its
// code and stock are what a bot wants before the sale starts.
func TestMetricsScheduledCodes(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	live, scheduled := ledgertest.NewCode(t), ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(live, 10, 1, true))
	later := ledgertest.Spec(scheduled, 10, 1, true)
	later.StartsAt, later.EndsAt = time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	l.CreateVoucher(t, later)
	for _, code := range []string{live, scheduled} {
		r := l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
		require.Equal(t, http.StatusOK, r.Status, "reconcile %s: %s", code, r.Raw)
	}
	page := ledgertest.Call(t, http.MethodGet, l.URL+api.MetricsPath, "", nil)
	require.Equal(t, http.StatusOK, page.Status)
	assert.Contains(t, page.Raw, `flashgate_reconcile_remaining{code="`+live+`"`, "a live voucher's gauge")
	assert.NotContains(t, page.Raw, scheduled, "a scheduled voucher's code on the open /metrics")
}
