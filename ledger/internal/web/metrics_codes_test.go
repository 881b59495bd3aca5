package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
)

// TestMetricsScheduledCodes: /metrics, which answers without a token, names
// the live flash vouchers the reconciler saw but not a scheduled one: its
// code and stock are what a bot wants before the sale starts.
func TestMetricsScheduledCodes(t *testing.T) {
	t.Parallel()
	l := newTestLedger(t, ledgerOptions{})
	live, scheduled := newCode(t), newCode(t)
	l.createVoucher(t, spec(live, 10, 1, true))
	later := spec(scheduled, 10, 1, true)
	later.StartsAt, later.EndsAt = time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	l.createVoucher(t, later)
	for _, code := range []string{live, scheduled} {
		r := l.call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
		require.Equal(t, http.StatusOK, r.Status, "reconcile %s: %s", code, r.Raw)
	}
	page := call(t, http.MethodGet, l.URL+api.MetricsPath, "", nil)
	require.Equal(t, http.StatusOK, page.Status)
	assert.Contains(t, page.Raw, `flashgate_reconcile_remaining{code="`+live+`"`, "a live voucher's gauge")
	assert.NotContains(t, page.Raw, scheduled, "a scheduled voucher's code on the open /metrics")
}
