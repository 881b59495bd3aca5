package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// TestRetryAfterRedisRestartFromStaleSnapshot drives the case through
// a proxy and a ledger process: Redis restarts from a snapshot saved before an
// order was admitted and written, another customer is admitted into the use
// the snapshot counts as free (the database refuses them, and their proxy flags
// the voucher sold out for a minute), and the order's retry there gets its
// 201 within seconds, not after RECONCILE_INTERVAL (an hour here): the ledger
// reconciles the state its Redis process did not write and publishes the
// change, which drops the proxy's flag.
func TestRetryAfterRedisRestartFromStaleSnapshot(t *testing.T) {
	t.Parallel()
	rs := devstacktest.NewRedis(t, devstack.RedisOptions{})
	s := newStack(t, stackOptions{redisURL: rs.URL(), soldOutTTL: time.Minute})
	// Exempt from "no repair": Redis restarts from an old snapshot on purpose,
	// and the reconcile that restores the lost order is what is tested.
	s.allowRepairs("redis restarts from a stale snapshot")
	ctx := context.Background()
	code := newCode(t)
	s.createVoucher(t, code, 1, 1, true)
	order := code + "-a"

	require.NoError(t, s.ledger.Warmup(ctx, code))
	require.NoError(t, s.rdb.Save(ctx).Err())
	r := s.reserve(t, code, 1, order)
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	require.NoError(t, rs.Kill())
	require.NoError(t, rs.Restart())
	// A second proxy, whose sold-out flag does not pass the order: the first
	// one's (set when the order took the last use) would.
	p2 := startProxy(t, stackOptions{redisURL: rs.URL(), soldOutTTL: time.Minute}, s.LedgerURL)
	r = p2.reserve(t, code, 2, code+"-b")
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, "OUT_OF_STOCK", r.Code())

	start := time.Now()
	for r = p2.reserve(t, code, 1, order); r.Status != http.StatusCreated; r = p2.reserve(t, code, 1, order) {
		require.Less(t, time.Since(start), 10*time.Second, "retry of %s: still %d %s", order, r.Status, r.Raw)
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("retry answered 201 after %s", time.Since(start).Round(time.Millisecond))
	require.True(t, replayed(r), "answered from the order's row")
	require.Equal(t, dbState{Used: 1, Active: 1, MaxPerCustomer: 1}, s.db(t, code))
	require.EqualValues(t, 0, s.redisRemaining(t, code))
}
