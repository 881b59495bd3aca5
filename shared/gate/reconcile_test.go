package gate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReconcile(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	old := time.UnixMilli(time.Now().Add(-10 * time.Minute).UnixMilli()).UTC()

	t.Run("repairs both directions", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(10, 3)
		loadVoucher(t, g, code, v,
			Order{OrderID: "hanging", CustomerID: 1, AdmittedAt: old}, // admitted, never written to the DB
			Order{OrderID: "written", CustomerID: 2, AdmittedAt: old}, // in the DB
		)
		got, _, err := g.Reserve(ctx, code, []Item{{3, "young", testAmount}}) // DB write may be in flight
		require.NoError(t, err)
		require.Equal(t, []Result{Reserved}, got)
		require.NoError(t, rdb.Set(ctx, Keys(code)[0], 42, redis.KeepTTL).Err()) // a drifted counter

		db := []Order{{OrderID: "written", CustomerID: 2}, {OrderID: "lost", CustomerID: 4}}
		res, err := g.Reconcile(ctx, code, v, db, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 42, RemainingAfter: 7, Released: []string{"hanging"}, Restored: 1}, res)

		owners, remaining := orderOwners(t, g, code)
		assert.Equal(t, map[string]int64{"written": 2, "young": 3, "lost": 4}, owners)
		assert.EqualValues(t, 7, remaining)
		assert.Equal(t, map[int64]int{2: 1, 3: 1, 4: 1}, users(t, rdb, code))
		for _, k := range Keys(code)[:4] { // done is empty: not created
			at, err := rdb.PExpireTime(ctx, k).Result()
			require.NoError(t, err)
			assert.Positive(t, at, "%s keeps a TTL", k)
		}

		// Nothing left to do the second time.
		res, err = g.Reconcile(ctx, code, v, db, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 7, RemainingAfter: 7, Released: []string{}}, res)

		// With no grace the young order is hanging too, once a millisecond of
		// Redis's clock has passed since its admission (age > grace).
		time.Sleep(2 * time.Millisecond)
		res, err = g.Reconcile(ctx, code, v, db, 0)
		require.NoError(t, err)
		assert.Equal(t, []string{"young"}, res.Released)
		assert.EqualValues(t, 8, res.RemainingAfter)
	})

	t.Run("never below zero", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(2, 1)
		loadVoucher(t, g, code, v, Order{OrderID: "a", CustomerID: 1}, Order{OrderID: "b", CustomerID: 2})
		db := []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "b", CustomerID: 2}, {OrderID: "c", CustomerID: 3}}
		res, err := g.Reconcile(ctx, code, v, db, time.Minute)
		require.NoError(t, err)
		assert.EqualValues(t, 0, res.RemainingAfter)
		assert.Equal(t, 1, res.Restored)
		got, _, err := g.Reserve(ctx, code, []Item{{9, "z", testAmount}})
		require.NoError(t, err)
		assert.Equal(t, []Result{OutOfStock}, got)
	})

	t.Run("database decides the customer", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(5, 1)
		loadVoucher(t, g, code, v, Order{OrderID: "a", CustomerID: 1, AdmittedAt: old})
		res, err := g.Reconcile(ctx, code, v, []Order{{OrderID: "a", CustomerID: 2}}, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, res.Released)
		st, _, err := g.State(ctx, code)
		require.NoError(t, err)
		assert.Equal(t, []Order{{OrderID: "a", CustomerID: 2, AdmittedAt: old}}, st.Orders)
		assert.Equal(t, map[int64]int{2: 1}, users(t, rdb, code))
	})

	t.Run("not loaded changes nothing", func(t *testing.T) {
		code := testCode(t, g, "v")
		res, err := g.Reconcile(ctx, code, testMeta(3, 1), []Order{{OrderID: "a", CustomerID: 1}}, time.Minute)
		require.NoError(t, err)
		assert.False(t, res.Loaded)
		n, err := rdb.Exists(ctx, Keys(code)...).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})

	t.Run("refuses conflicting input", func(t *testing.T) {
		code := testCode(t, g, "v")
		_, err := g.Reconcile(ctx, code, testMeta(3, 1), nil, -time.Second)
		assert.Error(t, err)
		_, err = g.Reconcile(ctx, code, testMeta(3, 1), []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "a", CustomerID: 2}}, time.Minute)
		assert.Error(t, err)
	})
}

// BenchmarkReconcile: one reconcile pass of a voucher holding 1,000, 50,000
// and 100,000 orders, all in the database (nothing to repair). Each script
// call blocks Redis while it runs, so besides the pass (pass-ms, the caller's
// wall clock) it reports the longest single script call as Redis measured it
// (max-script-us, from SLOWLOG with every command logged).
func BenchmarkReconcile(b *testing.B) {
	for _, n := range []int{1_000, 50_000, 100_000} {
		b.Run(fmt.Sprintf("orders=%d", n), func(b *testing.B) {
			g, rdb := newGate(b)
			ctx := context.Background()
			code := testCode(b, g, "big")
			v := testMeta(2*n, 1)
			orders := make([]Order, n)
			for i := range orders {
				orders[i] = Order{OrderID: fmt.Sprintf("o-%d", i), CustomerID: int64(i + 1), AdmittedAt: time.Now().UTC()}
			}
			loadVoucher(b, g, code, v, orders...)
			logEverything(b, rdb)
			var pass, longest time.Duration
			passes := 0
			for b.Loop() {
				require.NoError(b, rdb.SlowLogReset(ctx).Err())
				start := time.Now()
				res, err := g.Reconcile(ctx, code, v, orders, time.Minute)
				pass += time.Since(start)
				passes++
				if err != nil || res.Restored != 0 || len(res.Released) != 0 || res.RemainingAfter != int64(n) {
					b.Fatalf("reconcile: %+v, %v", res, err)
				}
				longest = max(longest, longestScript(b, rdb))
			}
			b.ReportMetric(float64(pass.Microseconds())/1000/float64(passes), "pass-ms")
			b.ReportMetric(float64(longest.Microseconds()), "max-script-us")
		})
	}
}

// logEverything makes Redis's SLOWLOG record every command until cleanup.
func logEverything(tb testing.TB, rdb *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	old, err := rdb.ConfigGet(ctx, "slowlog-*").Result()
	require.NoError(tb, err)
	require.NoError(tb, rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err())
	require.NoError(tb, rdb.ConfigSet(ctx, "slowlog-max-len", "1000000").Err())
	tb.Cleanup(func() {
		for k, v := range old {
			_ = rdb.ConfigSet(ctx, k, v).Err()
		}
	})
}

// longestScript is the longest EVAL/EVALSHA in Redis's SLOWLOG.
func longestScript(tb testing.TB, rdb *redis.Client) time.Duration {
	tb.Helper()
	entries, err := rdb.SlowLogGet(context.Background(), -1).Result()
	require.NoError(tb, err)
	var longest time.Duration
	for _, e := range entries {
		if len(e.Args) > 0 && strings.HasPrefix(strings.ToLower(e.Args[0]), "eval") {
			longest = max(longest, e.Duration)
		}
	}
	return longest
}
