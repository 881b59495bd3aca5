package web_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/app"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
)

// TestExportBudget: exports that stall (their clients read nothing of a CSV
// larger than the sockets' buffers) take at most EXPORT_MAX slots, each on a
// session of the exports' own pool; one more export is 429 RATE_LIMITED with
// Retry-After; a reserve is served meanwhile; and at EXPORT_TIMEOUT the
// stalled exports' transactions (their snapshots) end and their slots free.
//
// Not parallel: it counts the export sessions of the package's one Postgres,
// where another test's export would be counted too.
func TestExportBudget(t *testing.T) {
	const timeout = 5 * time.Second
	l := ledgertest.New(t, ledgertest.Options{Export: app.Config{ExportMax: 2, ExportTimeout: timeout}})
	code, other := ledgertest.NewCode(t), ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	l.CreateVoucher(t, ledgertest.Spec(other, 10, 1, false))
	l.Exec(t, `
		INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, created_at, expires_at,
		                                order_amount, discount_amount, released_at, release_reason)
		SELECT $1::text, i, $1::text || ':o.' || i, 'RELEASED', now(), now() + interval '15 minutes',
		       1000 + i, 1000, now(), 'CANCELLED'
		FROM generate_series(1, 200000) i`, code)

	// Each stalled export on a transport of its own: no connection is shared.
	export := func() *http.Response {
		req, err := http.NewRequest(http.MethodGet, l.URL+api.Fill(api.RouteExport, code), nil)
		require.NoError(t, err)
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	began := time.Now()
	for range 2 {
		require.Equal(t, http.StatusOK, export().StatusCode, "an export within EXPORT_MAX")
	}
	refused := export()
	assert.Equal(t, http.StatusTooManyRequests, refused.StatusCode, "the export over EXPORT_MAX")
	assert.NotEmpty(t, refused.Header.Get(api.HeaderRetryAfter), "a 429 says when to come back")

	sessions := func() (n int) {
		require.NoError(t, l.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = 'flashgate-ledger-export' AND xact_start IS NOT NULL`).Scan(&n))
		return n
	}
	assert.Equal(t, 2, sessions(), "the stalled exports hold a transaction each, on the exports' own pool")
	assert.Equal(t, http.StatusCreated, l.Reserve(t, other, 1, other+"-o1", 5_000).Status,
		"a reserve beside two stalled exports")

	ledgertest.WaitFor(t, timeout+20*time.Second, "the stalled exports' transactions end at EXPORT_TIMEOUT", func() bool { return sessions() == 0 })
	t.Logf("the stalled exports' transactions ended %s after they began (EXPORT_TIMEOUT %s)",
		time.Since(began).Round(100*time.Millisecond), timeout)
	assert.Equal(t, http.StatusOK, export().StatusCode, "a slot is free again")
}
