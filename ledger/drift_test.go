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
