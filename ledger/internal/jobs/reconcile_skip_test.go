package jobs_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// A reconcile run skips a voucher that nothing touched since its last clean
// reconcile, and reconciles it again as soon as the database or Redis moves:
// a reservation, an admission only in Redis (until the grace frees it), a
// change of the row alone. A change Redis's fingerprint cannot see (an order
// lost and another one added by hand) waits for the next full run, every
// reconcileFullEvery runs.
func TestReconcileSkipsUnchanged(t *testing.T) {
	t.Parallel()
	const grace = time.Second
	// A database of its own: ReconcileAll goes over every live flash voucher,
	// and the other tests' are not this test's to reconcile.
	l := ledgertest.New(t, ledgertest.Options{Grace: grace, DB: freshDatabase(t)})
	l.AllowRepairs("tests the reconciler itself") // exempt from "no repair"; agreement at the end still holds
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 2, true))
	ledgertest.ReserveAll(t, l.URL, code, ledgertest.Claims(code, 3, 1, "a"))
	js := l.NewJobs(jobs.Config{ExpiryInterval: time.Hour, ReconcileInterval: time.Hour, HangingGrace: grace})
	runs := 0
	run := func() (jobs.Report, bool) {
		t.Helper()
		runs++
		for _, rep := range js.ReconcileAll(ctx) {
			if rep.Code == code {
				return rep, true
			}
		}
		return jobs.Report{}, false
	}
	reconciled := func(msg string) jobs.Report {
		t.Helper()
		rep, ok := run()
		require.True(t, ok, "run %d: %s: not reconciled", runs, msg)
		return rep
	}
	skipped := func(msg string) {
		t.Helper()
		_, ok := run()
		require.False(t, ok, "run %d: %s: reconciled again", runs, msg)
	}

	reconciled("the first run is a full one")
	skipped("nothing changed")
	ledgertest.ReserveAll(t, l.URL, code, ledgertest.Claims(code, 1, 1, "b"))
	reconciled("a reservation")
	skipped("nothing changed since")

	got, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 99, OrderID: code + "-hang", OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, got)
	assert.Zero(t, reconciled("an admission only in Redis").Released)
	assert.Zero(t, reconciled("an admission within its grace is not clean").Released)
	time.Sleep(grace + 200*time.Millisecond)
	assert.Equal(t, 1, reconciled("the admission after its grace").Released)
	skipped("clean again")

	l.Exec(t, `UPDATE voucher SET min_order_amount = min_order_amount WHERE code = $1`, code)
	reconciled("the voucher row changed")
	skipped("nothing changed since")

	// Redis loses order b-c1-o0 and holds an order the database never had, with
	// an admission time long past, for the same customer: the same counts.
	rdb, err := gate.NewClient(devstacktest.RedisURL(t), gate.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	keys := gate.Keys(code)
	lost := code + "-b-c1-o0"
	require.EqualValues(t, 1, rdb.HDel(ctx, keys[2], lost).Val())
	old := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
	require.EqualValues(t, 1, rdb.HSet(ctx, keys[2], code+"-ghost", "1:"+old).Val())
	for runs%jobs.ReconcileFullEvery != 0 {
		skipped("a change the fingerprint cannot see waits for the full run")
	}
	rep := reconciled("the full run")
	assert.Equal(t, 1, rep.Released, "the order the database never had")
	assert.Equal(t, 1, rep.Restored, "the order Redis lost")
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}

// freshDatabase creates an empty database on the test server, dropped after
// the test, and returns its URL.
func freshDatabase(t *testing.T) string {
	t.Helper()
	return devstacktest.NewDatabase(t)
}
