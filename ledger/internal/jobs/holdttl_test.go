package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// holdSpec is a create body with a hold of the voucher's own.
type holdSpec struct {
	ledgertest.VoucherSpec
	HoldTTL string `json:"holdTtl,omitempty"`
}

// holds returns each reservation's hold (expires_at - created_at) by orderId.
func holds(l *ledgertest.Ledger, tb testing.TB, code string) map[string]time.Duration {
	tb.Helper()
	rows, err := l.Pool.Query(context.Background(), `
		SELECT order_id, expires_at - created_at FROM voucher_redemption WHERE voucher_code = $1`, code)
	require.NoError(tb, err)
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var id string
		var d time.Duration
		require.NoError(tb, rows.Scan(&id, &d))
		out[id] = d
	}
	require.NoError(tb, rows.Err())
	return out
}

// TestHoldTTL: a voucher's holdTtl ("2s") sets its reservations' expiry under
// a ledger whose RESERVATION_TTL is 15 minutes, and the sweeper gives their
// uses back (Postgres used_count and, flash, Redis remaining agree). A PATCH
// of holdTtl applies to the reservations made after it: those made before
// keep RESERVATION_TTL and are not swept.
func TestHoldTTL(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{true, false} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := ledgertest.New(t, ledgertest.Options{DB: ledgertest.OwnPostgres(t), TTL: 15 * time.Minute})
			const n = 20
			created, patched := ledgertest.NewCode(t), ledgertest.NewCode(t)
			r := l.Call(t, http.MethodPost, "/admin/vouchers", holdSpec{ledgertest.Spec(created, n, 1, flash), "2s"})
			v := ledgertest.View(t, r, http.StatusCreated)
			assert.Equal(t, voucher.Duration(2*time.Second), v.HoldTTL, "created view %s", r.Raw)
			l.CreateVoucher(t, ledgertest.Spec(patched, 2*n, 1, flash))
			if flash {
				l.Checks.AddFlash(created)
			}

			short := ledgertest.Claims(created, n, 1, "short")
			ledgertest.ReserveAll(t, l.URL, created, short)
			before := ledgertest.Claims(patched, n, 1, "before")
			ledgertest.ReserveAll(t, l.URL, patched, before)
			r = l.Patch(t, patched, map[string]any{"holdTtl": "2s"})
			assert.Equal(t, voucher.Duration(2*time.Second), ledgertest.View(t, r, http.StatusOK).HoldTTL, "patched view %s", r.Raw)
			after := claimsFrom(patched, n, n, "after")
			ledgertest.ReserveAll(t, l.URL, patched, after)

			for id, d := range holds(l, t, created) {
				assert.Equal(t, 2*time.Second, d, "hold of %s", id)
			}
			holds := holds(l, t, patched)
			for _, c := range before {
				assert.Equal(t, 15*time.Minute, holds[c.Order], "hold of %s, reserved before the PATCH", c.Order)
			}
			for _, c := range after {
				assert.Equal(t, 2*time.Second, holds[c.Order], "hold of %s, reserved after the PATCH", c.Order)
			}

			ledgertest.Eventually(t, 10*time.Second, func() bool {
				var live int
				require.NoError(t, l.Pool.QueryRow(context.Background(), `
					SELECT count(*) FROM voucher_redemption
					WHERE voucher_code = ANY($1) AND status = 'RESERVED' AND expires_at >= now()
					  AND expires_at - created_at < interval '1 minute'`, []string{created, patched}).Scan(&live))
				return live == 0
			}, "2s holds still live")
			swept, err := l.Jobs.Sweep(context.Background())
			require.NoError(t, err)
			assert.Equal(t, 2*n, swept, "Sweep() released")

			checkSwept(l, t, created, short, flash)
			st := l.Statuses(t, patched)
			for _, c := range before {
				assert.Equal(t, "RESERVED", st[c.Order], "order %s, reserved before the PATCH", c.Order)
			}
			for _, c := range after {
				assert.Equal(t, "RELEASED", st[c.Order], "order %s, reserved after the PATCH", c.Order)
			}
			b := l.CheckBooks(t, patched)
			assert.Equal(t, n, b.Used, "used_count of %s after the sweep", patched)
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, b, patched)
			}
		})
	}
}

// claimsFrom is claims for customers first+1 .. first+n, one order each.
func claimsFrom(code string, first, n int, round string) []ledgertest.Claim {
	out := ledgertest.Claims(code, first+n, 1, round)
	return out[first:]
}

// TestHoldTTLValidation: holdTtl is a Go duration from 1s up to a week, on
// create and PATCH; anything else is 400 INVALID_REQUEST naming holdTtl, and
// writes nothing.
func TestHoldTTLValidation(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, false))
	for _, bad := range []any{"999ms", "0s", "-3m", "3 minutes", "3", "", "169h", 90, true} {
		other := ledgertest.NewCode(t)
		r := l.Call(t, http.MethodPost, "/admin/vouchers", map[string]any{
			"code": other, "discountAmount": 1, "totalLimit": 1, "holdTtl": bad,
			"startsAt": time.Now().Add(-time.Hour), "endsAt": time.Now().Add(time.Hour)})
		assert.Equal(t, http.StatusBadRequest, r.Status, "create with holdTtl %v: %s", bad, r.Raw)
		assert.Contains(t, r.Raw, "holdTtl", "create with holdTtl %v", bad)
		assert.Equal(t, http.StatusNotFound, l.Call(t, http.MethodGet, "/admin/vouchers/"+other, nil).Status,
			"create with holdTtl %v wrote the voucher", bad)
		r = l.Patch(t, code, map[string]any{"holdTtl": bad})
		assert.Equal(t, http.StatusBadRequest, r.Status, "PATCH holdTtl %v: %s", bad, r.Raw)
	}
	assert.Len(t, l.AuditEvents(t, code), 1, "only the create is audited")
	r := l.Patch(t, code, map[string]any{"holdTtl": "90s"})
	assert.Equal(t, voucher.Duration(90*time.Second), ledgertest.View(t, r, http.StatusOK).HoldTTL)
	r = l.Patch(t, code, map[string]any{"holdTtl": "1m30s"})
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.Len(t, l.AuditEvents(t, code), 2, "the same hold written again changes nothing")
}
