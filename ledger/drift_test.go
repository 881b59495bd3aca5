package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/devstack/devstacktest"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/gate"
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

// A write whose caller gave up (the proxy's LEDGER_TIMEOUT) while its group
// commit waited on the voucher's row lock, held from another session: the
// ledger must not give the Redis use back while that write can still commit.
// Held shorter than DB_TIMEOUT, the write commits after its caller left (the
// settler once gave the use back before); held longer, the server cancels the
// statement (statement_timeout) and the use goes back. Either way each order
// has a row and a Redis hold, or neither, and remaining agrees.
func TestGiveUpWhileRowLockedKeepsAgreement(t *testing.T) {
	t.Parallel()
	for name, hold := range map[string]time.Duration{"commits late": 1200 * time.Millisecond, "cancelled": 3500 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			giveUpWhileRowLocked(t, hold)
		})
	}
}

func giveUpWhileRowLocked(t *testing.T, hold time.Duration) {
	db, redisURL := devstacktest.PostgresURL(t), devstacktest.RedisURL(t)
	l := newTestLedger(t, ledgerOptions{db: db, redis: redisURL})
	proc := startLedger(t, db, redisURL, "DB_TIMEOUT=1500ms", "HANGING_GRACE=5s")
	ctx := context.Background()
	code := newCode(t)
	l.createVoucher(t, spec(code, 10, 1, true))
	require.NoError(t, l.led.Warmup(ctx, code))

	const n = 4
	orders := make([]string, n)
	for i := range orders {
		orders[i] = fmt.Sprintf("%s-%d", code, i)
		rs, _, err := l.gate.Reserve(ctx, code, []gate.Item{{CustomerID: int64(i + 1), OrderID: orders[i], OrderAmount: 5_000}})
		require.NoError(t, err)
		require.Equal(t, []gate.Result{gate.Reserved}, rs)
	}

	tx, err := l.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM voucher WHERE code = $1 FOR UPDATE`, code)
	require.NoError(t, err)
	locked := time.Now()
	impatient := &http.Client{Timeout: 100 * time.Millisecond}
	for i, order := range orders {
		body, err := json.Marshal(claimBody(int64(i+1), order, 5_000))
		require.NoError(t, err)
		resp, err := impatient.Post(proc.URL+"/internal/vouchers/"+code+"/reservations", "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
			t.Logf("order %s answered %d while the row was locked", order, resp.StatusCode)
		}
	}
	time.Sleep(time.Until(locked.Add(hold))) // the settler's rounds run meanwhile
	require.NoError(t, tx.Commit(ctx))

	eventually(t, 10*time.Second, func() bool {
		b := l.books(t, code)
		st := redisState(t, l.gate, code)
		return int64(len(st.Orders)) == int64(b.Used) && st.Remaining == b.remaining()
	}, "redis and postgres never agreed about %s", code)
	time.Sleep(2 * time.Second) // a late commit, or a late give-back, would show now
	b := l.checkBooks(t, code)
	checkRedisMatches(t, l.gate, b, code)
	t.Logf("%d of %d orders written", b.Used, n)
}

// No setting lets the reconciler free a Redis hold while its write could still
// commit: the group commit's deadline (WRITE_TIMEOUT) is capped so that it,
// plus the DB_TIMEOUT its last statement may run on the server, ends before
// HANGING_GRACE; a grace with no room for a write at all is refused.
func TestWriteTimeoutWithinGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want time.Duration // 0: refused
	}{
		{map[string]string{}, 10 * time.Second},
		{map[string]string{"HANGING_GRACE": "2s"}, 1400 * time.Millisecond},
		{map[string]string{"HANGING_GRACE": "1s"}, 400 * time.Millisecond},
		{map[string]string{"HANGING_GRACE": "5s", "WRITE_TIMEOUT": "2s"}, 2 * time.Second},
		{map[string]string{"HANGING_GRACE": "5s", "WRITE_TIMEOUT": "20s", "DB_TIMEOUT": "1500ms"}, 3400 * time.Millisecond},
		{map[string]string{"HANGING_GRACE": "1s", "DB_TIMEOUT": "1500ms"}, 0},
	} {
		env := map[string]string{"DATABASE_URL": "postgres://x"}
		for k, v := range tc.env {
			env[k] = v
		}
		c, err := configFrom(envconf.NewFrom(env))
		if tc.want == 0 {
			if assert.Error(t, err, "configFrom(%v)", tc.env) {
				assert.Contains(t, err.Error(), "HANGING_GRACE (1s) must be above DB_TIMEOUT (1.5s)")
			}
			continue
		}
		require.NoError(t, err, "configFrom(%v)", tc.env)
		assert.Equal(t, tc.want, c.WriteTimeout, "WriteTimeout of %v", tc.env)
		assert.Less(t, c.WriteTimeout+c.DBTimeout, c.HangingGrace, "%v", tc.env)
	}
}
