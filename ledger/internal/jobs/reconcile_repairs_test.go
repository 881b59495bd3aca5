package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// repairCounts reads flashgate_reconcile_repairs_total by kind.
func repairCounts(j *jobs.Jobs) map[string]float64 {
	out := map[string]float64{}
	for _, kind := range jobs.RepairKindNames {
		out[kind] = testutil.ToFloat64(j.Config.Metrics.ReconcileRepairs.WithLabelValues(kind))
	}
	return out
}

// reconcileAudits returns the repairs of code's reconcile audit rows, oldest first.
func reconcileAudits(l *ledgertest.Ledger, t *testing.T, code string) [][]string {
	t.Helper()
	var out [][]string
	for _, e := range l.AuditEvents(t, code) {
		if e.Action != store.ActionReconcile {
			continue
		}
		var after jobs.ReconcileAudit
		require.NoError(t, json.Unmarshal(e.After, &after))
		out = append(out, after.Repairs)
	}
	return out
}

// Every reconcile that repaired something counts it by kind in
// flashgate_reconcile_repairs_total and writes an audit row naming the kinds,
// a repair of the counter alone or of the terms alone included; one that found
// nothing to repair does neither.
func TestReconcileRepairsCountedAndAudited(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{Grace: time.Second})
	l.AllowRepairs("it corrupts Redis by hand to test the reconciler's repairs")
	rdb, err := gate.NewClient(devstacktest.RedisURL(t), gate.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	const total = 10
	l.CreateVoucher(t, ledgertest.Spec(code, total, 1, true))
	ledgertest.ReserveAll(t, l.URL, code, ledgertest.Claims(code, 2, 1, "a"))
	keys := gate.Keys(code)
	old := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)

	var audits [][]string
	steps := []struct {
		name  string
		drift func(t *testing.T)
		want  []string // the kinds repaired
	}{
		{"nothing to repair", func(*testing.T) {}, nil},
		{"the counter alone", func(t *testing.T) {
			require.NoError(t, rdb.Set(ctx, keys[0], total+5, redis.KeepTTL).Err())
		}, []string{jobs.RepairRemaining}},
		{"the terms alone", func(t *testing.T) {
			// Changed long ago: terms that differ now are a drift, not a
			// change whose Redis step is still to come.
			_, err := l.Pool.Exec(ctx, `UPDATE voucher SET updated_at = now() - interval '1 hour' WHERE code = $1`, code)
			require.NoError(t, err)
			require.NoError(t, rdb.HSet(ctx, keys[3], "perUserLimit", 5).Err())
		}, []string{jobs.RepairTerms}},
		{"the terms of a change just committed, whose ledger died before Redis", func(t *testing.T) {
			_, err := l.Pool.Exec(ctx, `UPDATE voucher SET updated_at = now() WHERE code = $1`, code)
			require.NoError(t, err)
			require.NoError(t, rdb.HSet(ctx, keys[3], "perUserLimit", 5).Err())
		}, nil},
		{"an order lost with its use, a hanging admission taken with one", func(t *testing.T) {
			lost := code + "-a-c1-o0"
			require.EqualValues(t, 1, rdb.HDel(ctx, keys[2], lost).Val())
			require.EqualValues(t, 1, rdb.HDel(ctx, keys[1], "1").Val())
			require.NoError(t, rdb.HSet(ctx, keys[2], code+"-ghost", "7:"+old).Err())
			require.NoError(t, rdb.HIncrBy(ctx, keys[1], "7", 1).Err())
		}, []string{jobs.RepairRestored, jobs.RepairReleased}},
		{"nothing again", func(*testing.T) {}, nil},
	}
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			before := repairCounts(l.Jobs)
			s.drift(t)
			if i%2 == 0 {
				_, err := l.Jobs.Reconcile(ctx, code) // the periodic reconciler
				require.NoError(t, err)
			} else {
				r := l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
				require.Equal(t, http.StatusOK, r.Status, r.Raw)
			}
			after := repairCounts(l.Jobs)
			for _, kind := range jobs.RepairKindNames {
				want := before[kind]
				for _, k := range s.want {
					if k == kind {
						want++
					}
				}
				assert.Equal(t, want, after[kind], "flashgate_reconcile_repairs_total{kind=%q}", kind)
			}
			if s.want != nil {
				audits = append(audits, s.want)
			}
			assert.Equal(t, audits, reconcileAudits(l, t, code), "the reconcile audit rows' repairs")
			ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
		})
	}
}

// A reconcile over several pages of orders while reservations keep arriving
// through the ledger repairs exactly what Redis lost and gained, and leaves
// Redis equal to the database once the reservations are written.
func TestReconcileStepsWhileReserving(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{Grace: time.Second})
	l.AllowRepairs("it corrupts Redis by hand to test the reconciler's repairs")
	rdb, err := gate.NewClient(devstacktest.RedisURL(t), gate.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	const total, held, lost, hanging = 5_000, 500, 30, 40
	l.CreateVoucher(t, ledgertest.Spec(code, total, 1, true))
	cs := ledgertest.Claims(code, held, 1, "a")
	ledgertest.ReserveAll(t, l.URL, code, cs)

	// Redis loses 30 orders with their uses (a restart from an older
	// snapshot) and holds 40 admissions the database never got, long past.
	keys := gate.Keys(code)
	old := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
	for _, c := range cs[:lost] {
		require.EqualValues(t, 1, rdb.HDel(ctx, keys[2], c.Order).Val())
		require.EqualValues(t, 1, rdb.HDel(ctx, keys[1], strconv.FormatInt(c.Customer, 10)).Val())
		require.NoError(t, rdb.Incr(ctx, keys[0]).Err())
	}
	for i := range hanging {
		customer := strconv.Itoa(100_000 + i)
		require.NoError(t, rdb.HSet(ctx, keys[2], fmt.Sprintf("%s-ghost-%d", code, i), customer+":"+old).Err())
		require.NoError(t, rdb.HIncrBy(ctx, keys[1], customer, 1).Err())
		require.NoError(t, rdb.Decr(ctx, keys[0]).Err())
	}

	before := repairCounts(l.Jobs)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reserved atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := l.Call(t, http.MethodPost, "/vouchers/"+code+"/reservations",
					ledgertest.ClaimBody(int64(200_000+w*10_000+i), fmt.Sprintf("%s-new-%d-%d", code, w, i), 5_000))
				if assert.Equal(t, http.StatusCreated, r.Status, r.Raw) {
					reserved.Add(1)
				}
			}
		})
	}
	ledgertest.WaitFor(t, 30*time.Second, "the reservations under way", func() bool { return reserved.Load() >= 16 })
	start := reserved.Load()
	rep, err := l.Jobs.Reconcile(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, hanging, rep.Released)
	assert.Equal(t, lost, rep.Restored)
	assert.LessOrEqual(t, rep.RedisRemainingAfter, rep.DBRemaining)
	// Passes with nothing to repair while the reservations go on: admissions
	// in flight are neither freed nor taken for a drifted counter.
	// At least five, and on until reservations completed during them (a
	// loaded machine may run five before a reserve returns).
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; n < 5 || (reserved.Load() == start && time.Now().Before(deadline)); n++ {
		rep, err := l.Jobs.Reconcile(ctx, code)
		require.NoError(t, err)
		assert.Zero(t, rep.Released+rep.Restored, "%+v", rep)
		assert.LessOrEqual(t, rep.RedisRemainingAfter, rep.DBRemaining)
	}
	during := reserved.Load() - start
	close(stop)
	wg.Wait()
	t.Logf("%d reserved during the reconciles, %d in all", during, reserved.Load())
	assert.Positive(t, during, "no reservation ran during the reconciles")
	after := repairCounts(l.Jobs)
	assert.Equal(t, before[jobs.RepairRestored]+1, after[jobs.RepairRestored])
	assert.Equal(t, before[jobs.RepairReleased]+1, after[jobs.RepairReleased])
	assert.Equal(t, before[jobs.RepairRemaining], after[jobs.RepairRemaining], "the counter agreed with the orders Redis held")
	assert.Equal(t, before[jobs.RepairTerms], after[jobs.RepairTerms])
	b := l.CheckBooks(t, code)
	assert.Equal(t, held+int(reserved.Load()), b.Used)
	ledgertest.CheckRedisMatches(t, l.Gate, b, code)
}
