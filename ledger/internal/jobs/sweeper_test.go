package jobs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// 50 reservations expire: the sweep gives every use back to the voucher, to the
// customers and (flash) to Redis, and the same customers can reserve again.
// The first round is swept by Jobs.Sweep, the second by a bin/ledger process's
// own ticker.
func TestSweepReleasesExpired(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{true, false} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			db := ledgertest.OwnPostgres(t) // the sweeps below release exactly this voucher's rows
			l := ledgertest.New(t, ledgertest.Options{DB: db, TTL: 2 * time.Second})
			code := ledgertest.NewCode(t)
			const n = 50
			l.CreateVoucher(t, ledgertest.Spec(code, n, 1, flash))

			// Round 1: swept by Jobs.Sweep.
			first := ledgertest.Claims(code, n, 1, "r1")
			ledgertest.ReserveAll(t, l.URL, code, first)
			b := l.CheckBooks(t, code)
			require.Equal(t, n, b.Used)
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, b, code)
			}
			l.WaitExpired(t, code)
			swept, err := l.Jobs.Sweep(context.Background())
			require.NoError(t, err)
			assert.Equal(t, n, swept, "Sweep() released")
			checkSwept(l, t, code, first, flash)

			// Round 2: the same customers, new orderIds, swept by a ledger
			// process's ticker.
			second := ledgertest.Claims(code, n, 1, "r2")
			ledgertest.ReserveAll(t, l.URL, code, second)
			b = l.CheckBooks(t, code)
			require.Equal(t, n, b.Used)
			require.Equal(t, n, b.Status["RESERVED"])
			if flash {
				require.Zero(t, ledgertest.RedisState(t, l.Gate, code).Remaining)
			}
			ledgertest.StartLedger(t, db, devstacktest.RedisURL(t), "EXPIRY_INTERVAL=500ms")
			// The sweeper gives the uses back in Redis after its commit:
			// the books show the release a moment before Redis does.
			ledgertest.Eventually(t, 10*time.Second, func() bool {
				return l.Books(t, code).Status["RESERVED"] == 0 && (!flash || len(ledgertest.RedisState(t, l.Gate, code).Orders) == 0)
			}, "the ledger process's sweeper did not release %s's reservations", code)
			checkSwept(l, t, code, second, flash)
		})
	}
}

// checkSwept asserts that every claim of cs is RELEASED and that code holds no
// use anywhere: used_count, each customer's count and (flash) Redis.
func checkSwept(l *ledgertest.Ledger, t *testing.T, code string, cs []ledgertest.Claim, flash bool) {
	t.Helper()
	st := l.Statuses(t, code)
	for _, c := range cs {
		assert.Equal(t, "RELEASED", st[c.Order], "order %s", c.Order)
	}
	b := l.CheckBooks(t, code)
	assert.Zero(t, b.Used, "used_count after the sweep")
	for c, n := range b.Usage {
		assert.Zero(t, n, "customer %d usage after the sweep", c)
	}
	if flash {
		s := ledgertest.RedisState(t, l.Gate, code)
		assert.EqualValues(t, b.Total, s.Remaining, "redis remaining after the sweep")
		assert.Empty(t, s.Orders, "orders still held in redis after the sweep")
	}
}

// Payments arrive for expired reservations while several sweepers run: each
// reservation ends either CONFIRMED (its confirm got 200) or RELEASED (409
// RESERVATION_EXPIRED), never both and never counted twice. With newcomers
// racing for the released uses too, late confirms may lose their use.
func TestConfirmRacesSweeper(t *testing.T) {
	t.Parallel()
	db := ledgertest.OwnPostgres(t)
	for _, flash := range []bool{true, false} {
		for _, newcomers := range []bool{false, true} {
			t.Run(fmt.Sprintf("flash=%v/newcomers=%v", flash, newcomers), func(t *testing.T) {
				t.Parallel()
				testConfirmRacesSweeper(t, db, flash, newcomers)
			})
		}
	}
}

func testConfirmRacesSweeper(t *testing.T, db string, flash, newcomers bool) {
	l := ledgertest.New(t, ledgertest.Options{DB: db, TTL: time.Second, Grace: time.Second})
	code := ledgertest.NewCode(t)
	const customers, perCustomer, total = 30, 2, 60
	l.CreateVoucher(t, ledgertest.Spec(code, total, perCustomer, flash))
	expired := ledgertest.Claims(code, customers, perCustomer, "old")
	ledgertest.ReserveAll(t, l.URL, code, expired)
	l.WaitExpired(t, code)

	res := l.URL + "/vouchers/" + code + "/reservations"
	confirms := make([]ledgertest.Reply, len(expired))
	// Newcomers reserve through a ledger whose holds outlive the test, so
	// that the sweepers never take theirs.
	newRes := ledgertest.New(t, ledgertest.Options{DB: db}).URL + "/vouchers/" + code + "/reservations"
	var late []ledgertest.Claim
	if newcomers {
		late = ledgertest.Claims(code, customers, 1, "new")
		for i := range late {
			late[i].Customer += 1000
		}
	}
	lateReplies := make([]ledgertest.Reply, len(late))

	var racers, sweepers sync.WaitGroup
	start := make(chan struct{})
	for i, c := range expired {
		racers.Go(func() {
			<-start
			confirms[i] = ledgertest.Call(t, http.MethodPost, res+"/"+c.Order+"/confirm", "", nil)
		})
	}
	for i, c := range late {
		racers.Go(func() {
			<-start
			lateReplies[i] = ledgertest.Call(t, http.MethodPost, newRes, "", ledgertest.ClaimBody(c.Customer, c.Order, 5_000))
		})
	}
	done := make(chan struct{})
	var deadlocks atomic.Int64
	for range 4 {
		sweepers.Go(func() {
			<-start
			for {
				sweepOnce(t, l.Jobs, &deadlocks)
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	close(start)
	racers.Wait()
	close(done)
	sweepers.Wait()
	_, err := l.Jobs.Sweep(context.Background())
	require.NoError(t, err)

	st := l.Statuses(t, code)
	confirmed := 0
	for i, c := range expired {
		r := confirms[i]
		switch {
		case r.Status == http.StatusOK:
			confirmed++
			assert.Equal(t, "CONFIRMED", r.Body["status"], "Confirm(%s) = %s", c.Order, r.Raw)
			assert.Equal(t, "CONFIRMED", st[c.Order], "order %s was confirmed (200) but is %s", c.Order, st[c.Order])
		case r.Status == http.StatusConflict && r.Code() == "RESERVATION_EXPIRED":
			assert.Equal(t, "RELEASED", st[c.Order], "order %s got RESERVATION_EXPIRED but is %s", c.Order, st[c.Order])
		default:
			t.Errorf("Confirm(%s) = %d %s, want 200 or 409 RESERVATION_EXPIRED", c.Order, r.Status, r.Raw)
		}
	}
	taken := 0
	for i, c := range late {
		r := lateReplies[i]
		switch {
		case r.Status == http.StatusCreated:
			taken++
			assert.Equal(t, "RESERVED", st[c.Order], "order %s", c.Order)
		case r.Status == http.StatusConflict && r.Code() == "OUT_OF_STOCK":
			assert.NotContains(t, st, c.Order, "order %s got OUT_OF_STOCK but has a row", c.Order)
		default:
			t.Errorf("Reserve(%v) = %d %s, want 201 or 409 OUT_OF_STOCK", c, r.Status, r.Raw)
		}
	}
	if !newcomers {
		// Nobody else wanted the uses: every payment keeps its reservation.
		assert.Equal(t, len(expired), confirmed, "confirmed")
	}
	b := l.CheckBooks(t, code)
	assert.Equal(t, confirmed, b.Status["CONFIRMED"])
	assert.Equal(t, taken, b.Status["RESERVED"])
	assert.Equal(t, len(expired)-confirmed, b.Status["RELEASED"])
	assert.Equal(t, confirmed+taken, b.Used)
	for _, c := range expired {
		assert.LessOrEqual(t, b.Active[c.Customer], perCustomer, "customer %d", c.Customer)
	}
	t.Logf("confirmed %d of %d, newcomers reserved %d of %d, %d sweeps lost a deadlock",
		confirmed, len(expired), taken, len(late), deadlocks.Load())
	if flash {
		checkRedisAfterReconcile(l, t, code, b)
	}
}

// checkRedisAfterReconcile reconciles code and asserts that Redis then agrees
// with the database b. Nothing may run meanwhile: an order released between
// the reconciler's database read and its Redis step would come back as a
// hanging admission until the next round.
func checkRedisAfterReconcile(l *ledgertest.Ledger, t *testing.T, code string, b ledgertest.Books) {
	t.Helper()
	// Redis agrees without the reconciler, and the
	// reconcile then finds nothing to repair.
	agreementtest.RequireAgreement(t, l.RDB, l.Pool, code)
	before := ledgertest.RedisState(t, l.Gate, code)
	rep, err := l.Jobs.Reconcile(context.Background(), code)
	require.NoError(t, err)
	assert.Zero(t, rep.Drift, "reconcile found drift: %+v", rep)
	assert.Zero(t, rep.Released+rep.Restored, "reconcile repaired: %+v", rep)
	if rep.Drift != 0 || rep.Released != 0 || rep.Restored != 0 {
		t.Logf("reconcile found drift: %+v (redis held %d orders)", rep, len(before.Orders))
	}
	assert.LessOrEqual(t, rep.RedisRemainingAfter, rep.DBRemaining, "reconcile left redis above the database")
	assert.Equal(t, b.Remaining(), rep.DBRemaining)
	ledgertest.CheckRedisMatches(t, l.Gate, b, code)
}

// A sweep and a client's release of another order of the same customer run
// at once. Release, Insert and LateConfirm all take the customer's count
// before the voucher's used_count; the sweep must take them in that order too,
// or the two deadlock and Postgres aborts one after deadlock_timeout. The
// release is replayed statement by statement so that the sweep reliably runs
// in its middle.
func TestSweepLockOrderMatchesRelease(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{DB: ledgertest.OwnPostgres(t), TTL: 300 * time.Millisecond, NoRedis: true})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 2, false))
	cs := ledgertest.Claims(code, 1, 2, "x") // one customer, two orders
	ledgertest.ReserveAll(t, l.URL, code, cs)
	l.WaitExpired(t, code)
	byClient, bySweep := cs[0].Order, cs[1].Order

	// The client's release, as Store.Release runs it: the order's row, then
	// the customer's count, then (below) the voucher's used_count.
	tx, err := l.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `UPDATE voucher_redemption SET status = 'RELEASED', updated_at = now()
		WHERE order_id = $1 AND status = 'RESERVED'`, byClient)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE voucher_customer_usage SET used_count = used_count - 1
		WHERE voucher_code = $1 AND customer_id = $2`, code, cs[0].Customer)
	require.NoError(t, err)

	swept := make(chan error, 1)
	go func() {
		_, err := l.Jobs.Sweep(ctx)
		swept <- err
	}()
	// Wait until the sweep waits for a lock the release holds.
	ledgertest.Eventually(t, 5*time.Second, func() bool {
		var waiting bool
		require.NoError(t, l.Pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			               WHERE wait_event_type = 'Lock' AND query LIKE '%WITH due AS%')`).Scan(&waiting))
		return waiting
	}, "the sweep never waited for the release's locks")

	_, err = tx.Exec(ctx, `UPDATE voucher SET used_count = used_count - 1 WHERE code = $1`, code)
	assert.NoError(t, err, "the release's used_count update")
	if err == nil {
		assert.NoError(t, tx.Commit(ctx))
	}
	assert.NoError(t, <-swept, "Sweep() beside a release")

	st := l.Statuses(t, code)
	assert.Equal(t, "RELEASED", st[byClient])
	assert.Equal(t, "RELEASED", st[bySweep])
	b := l.CheckBooks(t, code)
	assert.Zero(t, b.Used)
}

// Sweeps of two ledgers (or two goroutines) at once take interleaved rows of
// the same customers. Each sweep updates many customers' counts; unless every
// sweep locks them in one order, two sweeps deadlock and Postgres aborts one
// after deadlock_timeout (a second). Small batches make the interleaving
// likely; a correct sweep never meets a deadlock here.
func TestConcurrentSweepsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{DB: ledgertest.OwnPostgres(t), TTL: 500 * time.Millisecond, NoRedis: true})
	ctx := context.Background()
	for round := range 2 {
		code := ledgertest.NewCode(t)
		l.CreateVoucher(t, ledgertest.Spec(code, 1000, 4, false))
		ledgertest.ReserveAll(t, l.URL, code, ledgertest.Claims(code, 100, 4, "d"))
		l.WaitExpired(t, code)
		var wg sync.WaitGroup
		for range 8 {
			j := l.NewJobs(jobs.Config{ExpiryBatch: 7})
			wg.Go(func() {
				if _, err := j.Sweep(ctx); err != nil {
					t.Errorf("round %d: Sweep() = %v", round, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return // one round shows it; more would only add deadlock_timeouts
		}
		b := l.CheckBooks(t, code)
		require.Equal(t, map[string]int{"RELEASED": 400}, b.Status, "round %d", round)
	}
}

// sweepOnce runs j.Sweep and reports its error, except a deadlock with a
// concurrent sweep, which it counts: TestConcurrentSweepsDoNotDeadlock covers
// that bug, and the aborted sweep wrote nothing (the next one takes its rows).
func sweepOnce(t *testing.T, j *jobs.Jobs, deadlocks *atomic.Int64) {
	if _, err := j.Sweep(context.Background()); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40P01" {
			deadlocks.Add(1)
			return
		}
		t.Errorf("Sweep() = %v", err)
	}
}

// A sweep whose release committed in Postgres while its answer came too late
// (the deadline ended the wait: the sweeper learns nothing of what it
// released) still gives the flash uses back in Redis: the sweeper knew its
// candidates before it released, and the settler decides each from the
// database. Before, Redis kept the orders until a reconcile.
func TestSweepWithLostAnswerGivesUsesBack(t *testing.T) {
	t.Parallel()
	db := ledgertest.OwnPostgres(t) // the sweep below releases exactly this voucher's rows
	l := ledgertest.New(t, ledgertest.Options{DB: db, TTL: time.Second})
	code := ledgertest.NewCode(t)
	const n = 20
	l.CreateVoucher(t, ledgertest.Spec(code, n, 1, true))
	ledgertest.ReserveAll(t, l.URL, code, ledgertest.Claims(code, n, 1, "lost"))
	l.WaitExpired(t, code)

	// The sweeper's own pool reaches Postgres through a link that, once
	// armed, holds every answer for 2 s from the release statement on: the
	// statement commits, its answer arrives after the sweep's deadline.
	u, err := url.Parse(db)
	require.NoError(t, err)
	link := newSlowLink(t, u.Host)
	u.Host = link.addr
	q := u.Query()
	q.Set("default_query_exec_mode", "simple_protocol") // the statement's text and its execution in one message
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pool.Ping(context.Background()))
	j := jobs.New(store.New(pool, time.Second), l.Gate, l.Pub, l.Settler, l.Ledger.Warmup, l.Log, jobs.Config{ExpiryBatch: 100})
	l.Checks.AddJobs(j)
	link.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = j.Sweep(ctx)
	cancel()
	require.Error(t, err, "the sweep's answer came after its deadline")
	ledgertest.Eventually(t, 10*time.Second, func() bool { return l.Books(t, code).Status["RESERVED"] == 0 },
		"the release did not commit in Postgres (the test needs it to)")
	b := l.CheckBooks(t, code)
	require.Zero(t, b.Used, "Postgres released every use")
	require.Equal(t, n, l.Settler.Drain(context.Background()), "the settler decided every candidate")
	ledgertest.CheckRedisMatches(t, l.Gate, b, code)
}

// slowLink relays TCP connections to upstream. Once armed, a statement that
// locks with SKIP LOCKED (the release) makes it hold each chunk from upstream
// for 2 s before passing it on.
type slowLink struct {
	addr        string
	armed, slow atomic.Bool
}

func newSlowLink(t *testing.T, upstream string) *slowLink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	s := &slowLink{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				defer up.Close()
				buf := make([]byte, 32<<10)
				for {
					k, err := c.Read(buf)
					if k > 0 {
						if s.armed.Load() && bytes.Contains(buf[:k], []byte("SKIP LOCKED")) {
							s.slow.Store(true)
						}
						if _, werr := up.Write(buf[:k]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer c.Close()
				buf := make([]byte, 32<<10)
				for {
					k, err := up.Read(buf)
					if k > 0 {
						if s.slow.Load() {
							time.Sleep(2 * time.Second)
						}
						if _, werr := c.Write(buf[:k]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}
