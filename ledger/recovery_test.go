package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// burstOutcome is what the clients of a burst saw.
type burstOutcome struct {
	final    map[string]ledgertest.Reply // orderId -> the definitive answer
	admitted map[string]ledgertest.Claim // orderIds answered 201
	retries  int                         // 503s and failed exchanges, each retried
}

// retryingBurst sends every claim to the ledger's public reserve route from
// workers goroutines. A 503 or a failed exchange is no answer: the client
// retries with the same orderId until it gets one. Once the clients have seen
// faultAt 201s, fault runs in its own goroutine and no new claim goes out
// until it calls begun (the fault has struck), so that the rest of the burst
// meets it; the burst returns after fault did.
func retryingBurst(t *testing.T, base, code string, cs []ledgertest.Claim, workers, faultAt int, fault func(begun func())) burstOutcome {
	t.Helper()
	out := burstOutcome{final: map[string]ledgertest.Reply{}, admitted: map[string]ledgertest.Claim{}}
	var mu sync.Mutex
	var created, retries atomic.Int64
	deadline := time.Now().Add(30 * time.Second)
	work := make(chan ledgertest.Claim)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c := range work {
				for {
					r, err := ledgertest.TryCall(http.MethodPost, base+"/vouchers/"+code+"/reservations", ledgertest.ClaimBody(c.Customer, c.Order, 5_000))
					if err == nil && r.Status != http.StatusServiceUnavailable {
						mu.Lock()
						out.final[c.Order] = r
						if r.Status == http.StatusCreated {
							out.admitted[c.Order] = c
							created.Add(1)
						}
						mu.Unlock()
						break
					}
					retries.Add(1)
					if time.Now().After(deadline) {
						t.Errorf("Reserve(%v): no answer before the deadline, last %v %d %s", c, err, r.Status, r.Raw)
						break
					}
					time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
				}
			}
		})
	}
	struck := make(chan struct{})
	faultDone := make(chan struct{})
	faulted := false
	strike := func() {
		faulted = true
		go func() {
			defer close(faultDone)
			fault(func() { close(struck) })
		}()
		<-struck
	}
	for _, c := range cs {
		if !faulted && created.Load() >= int64(faultAt) {
			strike()
		}
		work <- c
	}
	close(work)
	wg.Wait()
	if !faulted {
		t.Errorf("the burst ended with %d of %d 201s before the fault", created.Load(), faultAt)
		strike()
	}
	<-faultDone
	out.retries = int(retries.Load())
	return out
}

// shuffled returns cs in a random order.
func shuffled(cs []ledgertest.Claim) []ledgertest.Claim {
	out := append([]ledgertest.Claim(nil), cs...)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// checkBurst asserts what must hold after a burst that met faults: every
// order got 201 or a final 409, exactly stock orders were admitted (the
// crowd wants more), none by a customer above perUser, and the database holds
// exactly the admitted orders, each RESERVED for its customer.
func checkBurst(l *ledgertest.Ledger, t *testing.T, code string, cs []ledgertest.Claim, o burstOutcome, stock, perUser int) ledgertest.Books {
	t.Helper()
	perCustomer := map[int64]int{}
	for _, c := range cs {
		r, ok := o.final[c.Order]
		if !ok {
			continue // reported by retryingBurst
		}
		switch {
		case r.Status == http.StatusCreated:
			perCustomer[c.Customer]++
		case r.Status == http.StatusConflict && (r.Code() == "OUT_OF_STOCK" || r.Code() == "ALREADY_USED"):
		default:
			t.Errorf("Reserve(%v) = %d %s, want 201 or 409 OUT_OF_STOCK|ALREADY_USED", c, r.Status, r.Raw)
		}
	}
	assert.Equal(t, stock, len(o.admitted), "orders admitted (201)")
	for c, n := range perCustomer {
		assert.LessOrEqual(t, n, perUser, "customer %d was admitted %d times", c, n)
	}
	st := l.Statuses(t, code)
	for id := range o.admitted {
		assert.Equal(t, "RESERVED", st[id], "order %s got a 201 but is %q in the database", id, st[id])
	}
	b := l.CheckBooks(t, code)
	assert.Len(t, b.Orders, len(o.admitted), "active rows vs 201s")
	for id, cust := range b.Orders {
		c, ok := o.admitted[id]
		assert.True(t, ok, "order %s holds a use but its client never got a 201", id)
		assert.Equal(t, c.Customer, cust, "order %s customer", id)
	}
	for c, n := range b.Active {
		assert.LessOrEqual(t, n, perUser, "customer %d holds %d uses", c, n)
	}
	return b
}

// Redis loses everything in the middle of a flash burst, once by FLUSHALL and
// once by a crash and restart without persistence. The ledger reloads the
// voucher from Postgres, clients retry their 503s with the same orderId, and
// the sale still ends exact: stock admitted, nobody above the limit, and Redis
// in line with the database after one reconcile.
func TestRedisLossMidBurst(t *testing.T) {
	t.Parallel()
	faults := []struct {
		name     string
		fault    func(t *testing.T, r *devstack.Redis, begun func())
		want503s bool
	}{
		{"flushall", func(t *testing.T, r *devstack.Redis, begun func()) {
			defer begun()
			rdb, err := gate.NewClient(r.URL(), gate.ClientOptions{Timeout: time.Second})
			if assert.NoError(t, err) {
				defer rdb.Close()
				assert.NoError(t, rdb.FlushAll(context.Background()).Err())
			}
		}, false},
		{"kill-restart", func(t *testing.T, r *devstack.Redis, begun func()) {
			assert.NoError(t, r.Kill())
			begun()
			// Longer than one failing call: go-redis dials five times,
			// 100ms apart, before a call fails, so a shorter outage would
			// only delay the clients, not send them 503s.
			time.Sleep(1200 * time.Millisecond)
			assert.NoError(t, r.Restart())
		}, true},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			r := devstacktest.NewRedis(t, devstack.RedisOptions{})
			l := ledgertest.New(t, ledgertest.Options{Redis: r.URL(), Grace: time.Second})
			// Exempt from "no repair": Redis is flushed or killed mid-burst on
			// purpose; agreement after the test's reconcile still holds.
			l.AllowRepairs("redis loses its data mid-burst")
			code := ledgertest.NewCode(t)
			const stock, perUser = 100, 2
			l.CreateVoucher(t, ledgertest.Spec(code, stock, perUser, true))
			cs := shuffled(ledgertest.Claims(code, 200, 3, "b")) // 600 orders, up to 3 per customer

			o := retryingBurst(t, l.URL, code, cs, 64, stock/4, func(begun func()) { f.fault(t, r, begun) })
			t.Logf("%d admitted, %d retries", len(o.admitted), o.retries)
			if f.want503s {
				require.Positive(t, o.retries, "no client got a 503 while redis was down")
			}
			b := checkBurst(l, t, code, cs, o, stock, perUser)

			rep, err := l.Jobs.Reconcile(context.Background(), code)
			require.NoError(t, err)
			t.Logf("reconcile: %+v", rep)
			assert.LessOrEqual(t, rep.RedisRemainingAfter, rep.DBRemaining, "reconcile left redis above the database")
			ledgertest.CheckRedisMatches(t, l.Gate, b, code)
		})
	}
}

// The ledger process is killed (SIGKILL) in the middle of a flash burst and
// started again. Clients see failed exchanges meanwhile and retry with the
// same orderId. Every 201 a client got has its row, nothing is oversold, and
// after the hanging grace one reconcile brings Redis in line with the
// database.
func TestLedgerKilledMidBurst(t *testing.T) {
	t.Parallel()
	r := devstacktest.NewRedis(t, devstack.RedisOptions{})
	db := devstacktest.PostgresURL(t)
	lp := ledgertest.StartLedger(t, db, r.URL()) // HANGING_GRACE=1s
	// An in-process ledger on the same servers, for reading the books.
	l := ledgertest.New(t, ledgertest.Options{DB: db, Redis: r.URL(), Grace: time.Second})
	// Exempt from "no repair": the ledger is SIGKILLed between taking uses in
	// Redis and committing them, so only the reconciler's release after the
	// grace can give those back; agreement after it still holds.
	l.AllowRepairs("the ledger is killed between redis and its commit")
	code := ledgertest.NewCode(t)
	const stock, perUser = 100, 2
	st := ledgertest.Call(t, http.MethodPost, lp.URL+"/admin/vouchers", "", ledgertest.Spec(code, stock, perUser, true))
	require.Equal(t, http.StatusCreated, st.Status, st.Raw)
	l.TrackFlash(code)
	cs := shuffled(ledgertest.Claims(code, 200, 3, "k"))

	o := retryingBurst(t, lp.URL, code, cs, 64, stock/4, func(begun func()) {
		assert.NoError(t, lp.Kill())
		begun()
		time.Sleep(200 * time.Millisecond)
		assert.NoError(t, lp.Restart())
	})
	t.Logf("%d admitted, %d retries", len(o.admitted), o.retries)
	require.Positive(t, o.retries, "the clients never noticed the ledger was down")
	b := checkBurst(l, t, code, cs, o, stock, perUser)

	time.Sleep(1100 * time.Millisecond) // past HANGING_GRACE: a write cut short can no longer land
	rep := ledgertest.Call(t, http.MethodPost, lp.URL+"/admin/vouchers/"+code+"/reconcile", "", nil)
	require.Equal(t, http.StatusOK, rep.Status, rep.Raw)
	t.Logf("reconcile: %s", rep.Raw)
	assert.LessOrEqual(t, rep.Body["redisRemainingAfter"], rep.Body["dbRemaining"], "reconcile left redis above the database")
	ledgertest.CheckRedisMatches(t, l.Gate, b, code)
}

// A ledger loads every live flash voucher that Redis lacks when it starts,
// with what the database holds, before any reserve asks for it.
func TestWarmAllReloadsLostVouchers(t *testing.T) {
	t.Parallel()
	r := devstacktest.NewRedis(t, devstack.RedisOptions{})
	rdb, err := gate.NewClient(r.URL(), gate.ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	l := ledgertest.New(t, ledgertest.Options{Redis: r.URL()})
	// Exempt from "no repair": Redis is flushed (and a counter overwritten) on
	// purpose; agreement after the last reload still holds.
	l.AllowRepairs("flushes redis on purpose")

	flashA, flashB, standard := ledgertest.NewCode(t), ledgertest.NewCode(t), ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(flashA, 10, 1, true))
	l.CreateVoucher(t, ledgertest.Spec(flashB, 20, 2, true))
	l.CreateVoucher(t, ledgertest.Spec(standard, 10, 1, false))
	ledgertest.ReserveAll(t, l.URL, flashA, ledgertest.Claims(flashA, 3, 1, "w"))
	ledgertest.ReserveAll(t, l.URL, flashB, ledgertest.Claims(flashB, 2, 2, "w"))
	ledgertest.ReserveAll(t, l.URL, standard, ledgertest.Claims(standard, 2, 1, "w"))
	res := l.URL + "/vouchers/" + flashB + "/reservations/"
	require.Equal(t, http.StatusOK, ledgertest.Call(t, http.MethodPost, res+flashB+"-w-c1-o0/confirm", "", nil).Status)
	require.Equal(t, http.StatusNoContent, ledgertest.Call(t, http.MethodDelete, res+flashB+"-w-c2-o1", "", nil).Status)

	checkLoaded := func(t *testing.T) {
		t.Helper()
		for _, code := range []string{flashA, flashB} {
			ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
			m, _, ok, err := l.Gate.Meta(ctx, code)
			require.NoError(t, err)
			require.True(t, ok)
			b := l.Books(t, code)
			assert.Equal(t, b.Total, m.TotalLimit)
			assert.True(t, m.FlashSale)
		}
		_, loaded, err := l.Gate.State(ctx, standard)
		require.NoError(t, err)
		assert.False(t, loaded, "a standard voucher was loaded into redis")
	}
	flush := func(t *testing.T) {
		t.Helper()
		require.NoError(t, rdb.FlushAll(ctx).Err())
		for _, code := range []string{flashA, flashB} {
			_, loaded, err := l.Gate.State(ctx, code)
			require.NoError(t, err)
			require.False(t, loaded)
		}
	}

	t.Run("Jobs.WarmAll", func(t *testing.T) {
		flush(t)
		l.Jobs.WarmAll(ctx)
		checkLoaded(t)
		// A second run changes nothing: a loaded voucher is never overwritten.
		require.NoError(t, rdb.Set(ctx, gate.Keys(flashA)[0], 7, redis.KeepTTL).Err())
		l.Jobs.WarmAll(ctx)
		assert.EqualValues(t, 7, ledgertest.RedisState(t, l.Gate, flashA).Remaining)
	})
	t.Run("ledger restart", func(t *testing.T) {
		lp := ledgertest.StartLedger(t, devstacktest.PostgresURL(t), r.URL())
		require.NoError(t, lp.Kill()) // so that its own warmup cannot load anything after the flush
		flush(t)
		require.NoError(t, lp.Restart())
		ledgertest.Eventually(t, 10*time.Second, func() bool {
			for _, code := range []string{flashA, flashB} {
				if _, loaded, err := l.Gate.State(ctx, code); err != nil || !loaded {
					return false
				}
			}
			return true
		}, "the restarted ledger did not reload %s and %s", flashA, flashB)
		checkLoaded(t)
	})
}
