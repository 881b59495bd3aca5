package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// Two ledgers over one database and one Redis sweep and reconcile the same
// vouchers from many goroutines at once, while clients release some of the
// expired reservations themselves and new ones arrive. No use is ever given
// back twice: at every instant used_count equals the active rows and each
// customer's count its active rows, and at the end Redis holds exactly what
// the database does.
func TestTwoLedgersSweepAndReconcile(t *testing.T) {
	t.Parallel()
	db := ledgertest.OwnPostgres(t)
	opts := ledgertest.Options{DB: db, TTL: time.Second, Grace: time.Second}
	ledgers := []*ledgertest.Ledger{ledgertest.New(t, opts), ledgertest.New(t, opts)}
	l := ledgers[0]
	// Exempt from "no repair": a reconciler test, whose reconciles race the
	// sweeps on purpose; Redis must still agree at the end.
	l.AllowRepairs("tests the reconciler racing the sweeper")
	ctx := context.Background()
	const customers, perUser, total, rounds = 15, 2, 100, 2
	flash := []string{ledgertest.NewCode(t), ledgertest.NewCode(t)}
	codes := append([]string{ledgertest.NewCode(t)}, flash...) // a standard voucher, then the flash ones
	for i, code := range codes {
		l.CreateVoucher(t, ledgertest.Spec(code, total, perUser, i > 0))
	}

	confirmed := map[string]bool{}
	var sampled atomic.Int64
	var calm time.Time // when the last reconcile ran
	var deadlocks atomic.Int64
	for round := range rounds {
		// Reserve through both ledgers; pay for every fifth order at once.
		type order struct {
			code string
			c    ledgertest.Claim
		}
		var current []order
		for _, code := range codes {
			cs := ledgertest.Claims(code, customers, perUser, fmt.Sprintf("r%d", round))
			for i := range cs {
				cs[i].Customer += int64(round * 1000)
			}
			ledgertest.ReserveAll(t, ledgers[0].URL, code, cs[:len(cs)/2])
			ledgertest.ReserveAll(t, ledgers[1].URL, code, cs[len(cs)/2:])
			for i, c := range cs {
				current = append(current, order{code, c})
				if i%5 == 0 {
					r := ledgertest.Call(t, http.MethodPost, ledgers[i%2].URL+"/vouchers/"+code+"/reservations/"+c.Order+"/confirm", "", nil)
					require.Equal(t, http.StatusOK, r.Status, r.Raw)
					confirmed[c.Order] = true
				}
			}
		}
		for _, code := range codes {
			l.WaitExpired(t, code)
		}

		// Sweepers and reconcilers on both ledgers, clients releasing the
		// orders they gave up on, and newcomers reserving, all at once; a
		// sampler checks the books all along.
		var chaos, sampler sync.WaitGroup
		start, stop := make(chan struct{}), make(chan struct{})
		for i := range 12 {
			j := ledgers[i%2].Jobs
			chaos.Go(func() {
				<-start
				for range 8 {
					sweepOnce(t, j, &deadlocks)
					for _, code := range flash {
						if rep, err := j.Reconcile(ctx, code); err != nil {
							t.Errorf("Reconcile(%s) = %v", code, err)
						} else if rep.RedisRemainingAfter > rep.DBRemaining {
							t.Errorf("Reconcile(%s) left redis at %d, above the database's %d", code, rep.RedisRemainingAfter, rep.DBRemaining)
						}
					}
				}
			})
		}
		for i, x := range current {
			if i%3 != 1 || confirmed[x.c.Order] {
				continue
			}
			chaos.Go(func() {
				<-start
				r := ledgertest.Call(t, http.MethodDelete, ledgers[i%2].URL+"/vouchers/"+x.code+"/reservations/"+x.c.Order, "", nil)
				assert.Equal(t, http.StatusNoContent, r.Status, "Release(%s) = %s", x.c.Order, r.Raw)
			})
		}
		for _, code := range codes {
			for i, c := range ledgertest.Claims(code, customers, 1, fmt.Sprintf("n%d", round)) {
				chaos.Go(func() {
					<-start
					r := ledgertest.Call(t, http.MethodPost, ledgers[i%2].URL+"/vouchers/"+code+"/reservations", "",
						ledgertest.ClaimBody(c.Customer+int64(round*1000)+500, c.Order, 5_000))
					assert.Equal(t, http.StatusCreated, r.Status, "Reserve(%v) = %s", c, r.Raw)
				})
			}
		}
		sampler.Go(func() {
			for {
				for _, code := range codes {
					sampleBooks(l, t, code)
					sampled.Add(1)
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		})
		close(start)
		chaos.Wait()
		close(stop)
		sampler.Wait()
		calm = time.Now()
		for _, code := range codes {
			l.CheckBooks(t, code)
		}
	}

	// Let everything left expire and sweep once more. A reconcile racing a
	// sweep may have put a just-released order back into Redis as a fresh
	// admission, which the next reconcile frees only once it is older than
	// the grace: wait that long after the racing ones, then reconcile, after
	// which Redis must equal the books.
	for _, code := range codes {
		l.WaitExpired(t, code)
	}
	_, err := ledgers[1].Jobs.Sweep(ctx)
	require.NoError(t, err)
	time.Sleep(time.Until(calm.Add(opts.Grace + 100*time.Millisecond)))
	for _, code := range codes {
		b := l.CheckBooks(t, code)
		st := l.Statuses(t, code)
		n := 0
		for id, s := range st {
			if confirmed[id] {
				n++
				assert.Equal(t, "CONFIRMED", s, "confirmed order %s", id)
			} else {
				assert.Equal(t, "RELEASED", s, "order %s", id)
			}
		}
		assert.Equal(t, n, b.Used, "%s: used_count after every hold expired", code)
	}
	for _, code := range flash {
		_, err := ledgers[0].Jobs.Reconcile(ctx, code)
		require.NoError(t, err)
		ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
	}
	t.Logf("books sampled %d times; %d sweeps lost a deadlock", sampled.Load(), deadlocks.Load())
}

// sampleBooks checks, in one statement and so in one snapshot, that code's
// used_count equals its active rows and that every customer's count equals
// its active rows: what a double release (or a lost one) would break.
func sampleBooks(l *ledgertest.Ledger, t *testing.T, code string) {
	t.Helper()
	var used, active, wrong int
	err := l.Pool.QueryRow(context.Background(), `
		SELECT v.used_count,
		       (SELECT count(*) FROM voucher_redemption r
		        WHERE r.voucher_code = v.code AND r.status IN ('RESERVED', 'CONFIRMED')),
		       (SELECT count(*) FROM
		          (SELECT customer_id, count(*) AS n FROM voucher_redemption
		           WHERE voucher_code = v.code AND status IN ('RESERVED', 'CONFIRMED') GROUP BY customer_id) a
		        FULL JOIN
		          (SELECT customer_id, used_count AS n FROM voucher_customer_usage WHERE voucher_code = v.code) u
		        USING (customer_id)
		        WHERE coalesce(a.n, 0) <> coalesce(u.n, 0))
		FROM voucher v WHERE v.code = $1`, code).Scan(&used, &active, &wrong)
	if err != nil {
		t.Errorf("sample %s: %v", code, err)
		return
	}
	if used != active || used < 0 || wrong != 0 {
		t.Errorf("%s: used_count %d, active rows %d, customers miscounted %d", code, used, active, wrong)
	}
}

// Many goroutines of one ledger reconcile the same voucher at once. They
// queue on the voucher's advisory lock; none may starve the others of
// database connections.
func TestConcurrentReconcileOneLedger(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{Grace: time.Second})
	l.AllowRepairs("tests the reconciler itself") // exempt from "no repair"; agreement at the end still holds
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 20, 1, true))
	ledgertest.ReserveAll(t, l.URL, code, ledgertest.Claims(code, 5, 1, "a"))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			rep, err := l.Jobs.Reconcile(ctx, code)
			if err != nil {
				t.Errorf("Reconcile(%s) = %v", code, err)
				return
			}
			assert.Equal(t, jobs.Report{Code: code, DBRemaining: 15, RedisRemaining: 15, RedisRemainingAfter: 15}, rep)
		})
	}
	wg.Wait()
}

// An admission in Redis whose database write never happened (the proxy lost
// the ledger) is freed by the reconciler only after the hanging grace; a
// database reservation Redis lost is put back; Redis's remaining never ends
// above what the database allows.
func TestReconcileHangingAndLost(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	l := ledgertest.New(t, ledgertest.Options{Grace: grace})
	// Exempt from "no repair": the test makes hanging and lost orders in
	// Redis by hand for the reconciler to repair.
	l.AllowRepairs("makes hanging and lost orders on purpose")
	rdb, err := gate.NewClient(devstacktest.RedisURL(t), gate.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	const total = 10
	l.CreateVoucher(t, ledgertest.Spec(code, total, 1, true))
	res := "/vouchers/" + code + "/reservations"
	keys := gate.Keys(code)
	reconcile := func(t *testing.T) jobs.Report {
		t.Helper()
		r := l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
		require.Equal(t, http.StatusOK, r.Status, r.Raw)
		for _, f := range []string{"code", "dbRemaining", "redisRemaining", "redisRemainingAfter", "drift", "released", "restored", "reloaded"} {
			assert.Contains(t, r.Body, f, "reconcile reply %s", r.Raw)
		}
		num := func(f string) int64 { v, _ := r.Body[f].(float64); return int64(v) }
		rep := jobs.Report{Code: r.Body["code"].(string), DBRemaining: num("dbRemaining"), RedisRemaining: num("redisRemaining"),
			RedisRemainingAfter: num("redisRemainingAfter"), Drift: num("drift"), Released: int(num("released")),
			Restored: int(num("restored")), Reloaded: r.Body["reloaded"] == true}
		assert.LessOrEqual(t, rep.RedisRemainingAfter, rep.DBRemaining, "reconcile left redis above the database: %s", r.Raw)
		return rep
	}

	// One reservation through the ledger, one admission only in Redis.
	require.Equal(t, http.StatusCreated, l.Call(t, http.MethodPost, res, ledgertest.ClaimBody(1, code+"-db", 5_000)).Status)
	before := time.Now()
	got, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 2, OrderID: code + "-hang", OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, got)
	admitted := time.Now()

	t.Run("kept within the grace", func(t *testing.T) {
		rep := reconcile(t)
		require.Less(t, time.Since(before), grace, "the machine was too slow to reconcile within the grace")
		assert.Equal(t, jobs.Report{Code: code, DBRemaining: total - 1, RedisRemaining: total - 2,
			RedisRemainingAfter: total - 2, Drift: -1}, rep)
		assert.Len(t, ledgertest.RedisState(t, l.Gate, code).Orders, 2)
	})
	t.Run("freed after the grace", func(t *testing.T) {
		time.Sleep(time.Until(admitted.Add(grace + 100*time.Millisecond)))
		rep := reconcile(t)
		assert.Equal(t, jobs.Report{Code: code, DBRemaining: total - 1, RedisRemaining: total - 2,
			RedisRemainingAfter: total - 1, Drift: -1, Released: 1}, rep)
		ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
		// The customer of the freed admission may reserve again.
		require.Equal(t, http.StatusCreated, l.Call(t, http.MethodPost, res, ledgertest.ClaimBody(2, code+"-again", 5_000)).Status)
	})
	t.Run("lost reservation restored", func(t *testing.T) {
		// Redis forgets code-again and gives its use back, as a failover to a
		// stale replica would: Redis now allows one use more than the database.
		require.EqualValues(t, 1, rdb.HDel(ctx, keys[2], code+"-again").Val())
		require.EqualValues(t, 1, rdb.HDel(ctx, keys[1], "2").Val())
		require.EqualValues(t, total-1, rdb.Incr(ctx, keys[0]).Val())
		rep := reconcile(t)
		assert.Equal(t, jobs.Report{Code: code, DBRemaining: total - 2, RedisRemaining: total - 1,
			RedisRemainingAfter: total - 2, Drift: 1, Restored: 1}, rep)
		ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
		// The restored order counts toward its customer's limit again.
		r := l.Call(t, http.MethodPost, res, ledgertest.ClaimBody(2, code+"-third", 5_000))
		assert.Equal(t, http.StatusConflict, r.Status, r.Raw)
		assert.Equal(t, "ALREADY_USED", r.Code())
	})
	t.Run("remaining set too high by hand", func(t *testing.T) {
		require.NoError(t, rdb.Set(ctx, keys[0], total+5, redis.KeepTTL).Err())
		rep := reconcile(t)
		assert.Equal(t, jobs.Report{Code: code, DBRemaining: total - 2, RedisRemaining: total + 5,
			RedisRemainingAfter: total - 2, Drift: 7}, rep)
		ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
	})
	t.Run("reloaded when redis lost the voucher", func(t *testing.T) {
		require.NoError(t, l.Gate.Unload(ctx, code))
		rep := reconcile(t)
		assert.Equal(t, jobs.Report{Code: code, DBRemaining: total - 2, RedisRemainingAfter: total - 2, Reloaded: true}, rep)
		ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
	})
}

// A late payment confirms a released reservation and takes its use again in
// the database, then in Redis. A reconcile between the two steps restores the
// order in Redis first: that is the confirmation's own step, done early, not
// a repair of something Redis lost (the log VOPR counted it as one). The
// ledger kit fails the test on any repair at its end.
func TestReconcileDuringALateConfirmIsNoRepair(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{Grace: time.Minute, TTL: 300 * time.Millisecond})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
	res := "/vouchers/" + code + "/reservations"
	order := code + "-late"
	require.Equal(t, http.StatusCreated, l.Call(t, http.MethodPost, res, ledgertest.ClaimBody(1, order, 5_000)).Status)
	time.Sleep(400 * time.Millisecond)
	_, err := l.Jobs.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, "RELEASED", l.Call(t, http.MethodGet, res+"/"+order, nil).Body["status"])
	r := l.Call(t, http.MethodPost, res+"/"+order+"/confirm", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	// The confirmation's Redis step has not run yet.
	_, err = l.Gate.Release(ctx, code, order)
	require.NoError(t, err)

	r = l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	assert.EqualValues(t, 0, r.Body["restored"], "no repair: %s", r.Raw)
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}
