package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 22, races that drifted Redis from Postgres (or the books from what
// the shop asked for), each reproduced against real servers.

// A hold the sweeper released, then cancelled by the shop: the DELETE records
// the cancel (reason CANCELLED, with its event), so a late payment callback
// is refused RESERVATION_RELEASED instead of taking a use again for an order
// the shop cancelled. Flash and standard alike.
func TestCancelAfterExpiryIsFinal(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{true, false} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := newTestLedger(t, ledgerOptions{ttl: 300 * time.Millisecond})
			code := newCode(t)
			l.createVoucher(t, spec(code, 2, 1, flash))
			res := "/vouchers/" + code + "/reservations/"
			order := code + "-a"
			r := l.reserve(t, code, 1, order, 5_000)
			require.Equal(t, http.StatusCreated, r.Status, r.Raw)
			l.waitExpired(t, code)
			_, err := l.jobs.Sweep(context.Background())
			require.NoError(t, err)
			require.Equal(t, "EXPIRED", l.row(t, order).reason())

			r = l.call(t, http.MethodDelete, res+order, nil)
			require.Equal(t, http.StatusNoContent, r.Status, r.Raw)
			assert.Equal(t, "CANCELLED", l.row(t, order).reason(), "release reason after the DELETE")

			r = l.call(t, http.MethodPost, res+order+"/confirm", nil)
			assert.Equal(t, http.StatusConflict, r.Status, "confirm after cancel: %s", r.Raw)
			assert.Equal(t, "RESERVATION_RELEASED", r.Code())
			assert.Equal(t, dbCounts{Used: 0, Rows: 1, Active: 0, MaxPerCustomer: 0}, l.counts(t, code))
			// A second DELETE is a no-op, as before.
			r = l.call(t, http.MethodDelete, res+order, nil)
			assert.Equal(t, http.StatusNoContent, r.Status, r.Raw)
			b := l.checkBooks(t, code)
			if flash {
				checkRedisMatches(t, l.gate, b, code)
			}
		})
	}
}

// An orderId that holds a use on voucher A, sent to flash voucher B, is
// ORDER_CONFLICT on every path, and B's Redis keeps no use for it: neither the
// gate's admission (the edge) nor a re-assert of A's row into B's keys (the
// public route) may lower B's remaining.
func TestOrderOfAnotherVoucherLeaksNoUse(t *testing.T) {
	t.Parallel()
	l := newTestLedger(t, ledgerOptions{})
	ctx := context.Background()
	a, b := newCode(t), newCode(t)
	l.createVoucher(t, spec(a, 5, 1, true))
	l.createVoucher(t, spec(b, 5, 1, true))
	require.NoError(t, l.led.Warmup(ctx, b))
	order := a + "-o"
	require.Equal(t, http.StatusCreated, l.reserve(t, a, 1, order, 5_000).Status)

	check := func(path string) {
		t.Helper()
		for _, code := range []string{a, b} {
			checkRedisMatches(t, l.gate, l.checkBooks(t, code), code)
		}
		assert.EqualValues(t, 5, redisState(t, l.gate, b).Remaining, "B's redis remaining after the %s", path)
	}
	for _, customer := range []int64{1, 2} {
		r := l.reserve(t, b, customer, order, 5_000)
		assert.Equal(t, http.StatusConflict, r.Status, r.Raw)
		assert.Equal(t, "ORDER_CONFLICT", r.Code())
	}
	check("ledger's public route")
	for _, customer := range []int64{1, 2} {
		st, code := l.edgeReserve(t, b, customer, order) // the gate, then /internal
		assert.Equal(t, http.StatusConflict, st)
		assert.Equal(t, "ORDER_CONFLICT", code)
	}
	check("proxy's path")
}
