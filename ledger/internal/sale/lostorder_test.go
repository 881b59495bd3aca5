package sale_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// edgeReserve reserves as the proxy does: the gate's script (loading the
// voucher on NOT_LOADED), then, when it admits, the ledger's admitted-write
// route. It returns the HTTP status and error code the client would get.
func edgeReserve(l *ledgertest.Ledger, tb testing.TB, code string, customer int64, order string) (int, string) {
	tb.Helper()
	ctx := context.Background()
	item := []gate.Item{{CustomerID: customer, OrderID: order, OrderAmount: 5_000}}
	res, err := gate.AdmitWarm(ctx, func(ctx context.Context) (gate.Result, error) {
		rs, _, err := l.Gate.Reserve(ctx, code, item)
		if err != nil {
			return 0, err
		}
		return rs[0], nil
	}, func(ctx context.Context) error { return l.Ledger.Warmup(ctx, code) })
	require.NoError(tb, err)
	if err := res.Err(); err != nil {
		st, body := httpx.ErrorReply(err)
		return st, body.Error
	}
	r := l.Call(tb, http.MethodPost, "/internal/vouchers/"+code+"/reservations", ledgertest.ClaimBody(customer, order, 5_000))
	return r.Status, r.Code()
}

// TestRetryAfterReloadDuringWrite: Redis loses a voucher while an admitted
// order's write is in flight and loads it again from the database before the
// commit, so the new generation lacks the order and counts its use as free.
// Another customer takes that use in Redis (the database refuses them). The
// order's retry is answered 201 at once, and Redis agrees with the database
// without a reconcile: the commit put the order back.
func TestRetryAfterReloadDuringWrite(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 1, 1, true))
	require.NoError(t, l.Ledger.Warmup(ctx, code))
	order, other := code+"-a", code+"-b"

	rs, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 1, OrderID: order, OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, rs)
	// The write is in flight: Redis loses the voucher and reloads it.
	require.NoError(t, l.Gate.Unload(ctx, code))
	require.NoError(t, l.Ledger.Warmup(ctx, code))
	rs, _, err = l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 2, OrderID: other, OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, rs, "the reload counted the in-flight order's use as free")
	// The order's write commits, then the other customer's is refused.
	r := l.Call(t, http.MethodPost, "/internal/vouchers/"+code+"/reservations", ledgertest.ClaimBody(1, order, 5_000))
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	r = l.Call(t, http.MethodPost, "/internal/vouchers/"+code+"/reservations", ledgertest.ClaimBody(2, other, 5_000))
	require.Equal(t, http.StatusConflict, r.Status, r.Raw)
	require.Equal(t, "OUT_OF_STOCK", r.Code())

	st, errCode := edgeReserve(l, t, code, 1, order)
	assert.Equal(t, http.StatusCreated, st, "retry of %s: %s", order, errCode)
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
	st, errCode = edgeReserve(l, t, code, 3, code+"-c")
	assert.Equal(t, http.StatusConflict, st)
	assert.Equal(t, "OUT_OF_STOCK", errCode)
}

// TestRetryAfterRedisRestartFromStaleSnapshot: Redis restarts from a snapshot
// saved before an order was admitted and written. Its remaining counts that
// use as free, so another customer takes it in Redis (the database refuses
// them) and the order's retry would be OUT_OF_STOCK until the next reconcile
// (an hour here). The jobs notice that the voucher's state was not written
// from the database by the Redis process serving it and reconcile it within
// seconds; the restored order is reported as drift.
func TestRetryAfterRedisRestartFromStaleSnapshot(t *testing.T) {
	t.Parallel()
	rs := devstacktest.NewRedis(t, devstack.RedisOptions{})
	l := ledgertest.New(t, ledgertest.Options{Redis: rs.URL()})
	// Exempt from "no repair": Redis restarts from an old snapshot on purpose,
	// and the reconcile that restores the lost order is what is tested.
	l.AllowRepairs("redis restarts from a stale snapshot")
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 1, 1, true))
	order := code + "-a"

	require.NoError(t, l.Ledger.Warmup(ctx, code))
	rdb, err := gate.NewClient(rs.URL(), gate.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	require.NoError(t, rdb.Save(ctx).Err())
	st, errCode := edgeReserve(l, t, code, 1, order)
	require.Equal(t, http.StatusCreated, st, errCode)
	require.NoError(t, rs.Kill())
	require.NoError(t, rs.Restart())
	st, errCode = edgeReserve(l, t, code, 2, code+"-b")
	require.Equal(t, http.StatusConflict, st)
	require.Equal(t, "OUT_OF_STOCK", errCode, "the database refuses the use the stale snapshot counted as free")

	reg := prometheus.NewRegistry()
	js := l.NewJobs(jobs.Config{ExpiryInterval: time.Hour, ReconcileInterval: time.Hour,
		HangingGrace: 30 * time.Second, Metrics: jobs.NewMetrics(reg)})
	jctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go js.Run(jctx, jctx.Done())
	start := time.Now()
	for st != http.StatusCreated {
		require.Less(t, time.Since(start), 10*time.Second, "retry of %s: still %d %s", order, st, errCode)
		time.Sleep(100 * time.Millisecond)
		st, errCode = edgeReserve(l, t, code, 1, order)
	}
	t.Logf("retry answered 201 after %s", time.Since(start).Round(time.Millisecond))
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
	assert.EqualValues(t, 1, gaugeValue(t, reg, "flashgate_reconcile_drift", code), "the restored order is drift")
}

// gaugeValue reads a per-voucher gauge from reg.
func gaugeValue(tb testing.TB, reg *prometheus.Registry, name, code string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	require.NoError(tb, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "code" && lp.GetValue() == code {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	tb.Fatalf("%s{code=%q} not found", name, code)
	return 0
}
