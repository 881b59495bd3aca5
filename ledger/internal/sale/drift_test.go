package sale_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// A hold the sweeper released, then cancelled by the shop: the DELETE records
// the cancel (reason CANCELLED, with its event), so a late payment callback
// is refused RESERVATION_RELEASED instead of taking a use again for an order
// the shop cancelled. Flash and standard alike.
func TestCancelAfterExpiryIsFinal(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{true, false} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			l := ledgertest.New(t, ledgertest.Options{TTL: 300 * time.Millisecond})
			code := ledgertest.NewCode(t)
			l.CreateVoucher(t, ledgertest.Spec(code, 2, 1, flash))
			res := "/vouchers/" + code + "/reservations/"
			order := code + "-a"
			r := l.Reserve(t, code, 1, order, 5_000)
			require.Equal(t, http.StatusCreated, r.Status, r.Raw)
			l.WaitExpired(t, code)
			_, err := l.Jobs.Sweep(context.Background())
			require.NoError(t, err)
			require.Equal(t, "EXPIRED", rowOf(l, t, order).reason())

			r = l.Call(t, http.MethodDelete, res+order, nil)
			require.Equal(t, http.StatusNoContent, r.Status, r.Raw)
			assert.Equal(t, "CANCELLED", rowOf(l, t, order).reason(), "release reason after the DELETE")

			r = l.Call(t, http.MethodPost, res+order+"/confirm", nil)
			assert.Equal(t, http.StatusConflict, r.Status, "confirm after cancel: %s", r.Raw)
			assert.Equal(t, "RESERVATION_RELEASED", r.Code())
			assert.Equal(t, ledgertest.DBCounts{Used: 0, Rows: 1, Active: 0, MaxPerCustomer: 0}, l.Counts(t, code))
			// A second DELETE is a no-op, as before.
			r = l.Call(t, http.MethodDelete, res+order, nil)
			assert.Equal(t, http.StatusNoContent, r.Status, r.Raw)
			b := l.CheckBooks(t, code)
			if flash {
				ledgertest.CheckRedisMatches(t, l.Gate, b, code)
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
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	a, b := ledgertest.NewCode(t), ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(a, 5, 1, true))
	l.CreateVoucher(t, ledgertest.Spec(b, 5, 1, true))
	require.NoError(t, l.Ledger.Warmup(ctx, b))
	order := a + "-o"
	require.Equal(t, http.StatusCreated, l.Reserve(t, a, 1, order, 5_000).Status)

	check := func(path string) {
		t.Helper()
		for _, code := range []string{a, b} {
			ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
		}
		assert.EqualValues(t, 5, ledgertest.RedisState(t, l.Gate, b).Remaining, "B's redis remaining after the %s", path)
	}
	for _, customer := range []int64{1, 2} {
		r := l.Reserve(t, b, customer, order, 5_000)
		assert.Equal(t, http.StatusConflict, r.Status, r.Raw)
		assert.Equal(t, "ORDER_CONFLICT", r.Code())
	}
	check("ledger's public route")
	for _, customer := range []int64{1, 2} {
		st, code := edgeReserve(l, t, b, customer, order) // the gate, then /internal
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
	l := ledgertest.New(t, ledgertest.Options{DB: db, Redis: redisURL})
	proc := ledgertest.StartLedger(t, db, redisURL, "DB_TIMEOUT=1500ms", "HANGING_GRACE=5s")
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, true))
	require.NoError(t, l.Ledger.Warmup(ctx, code))

	const n = 4
	orders := make([]string, n)
	for i := range orders {
		orders[i] = fmt.Sprintf("%s-%d", code, i)
		rs, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: int64(i + 1), OrderID: orders[i], OrderAmount: 5_000}})
		require.NoError(t, err)
		require.Equal(t, []gate.Result{gate.Reserved}, rs)
	}

	tx, err := l.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM voucher WHERE code = $1 FOR UPDATE`, code)
	require.NoError(t, err)
	locked := time.Now()
	impatient := &http.Client{Timeout: 100 * time.Millisecond}
	for i, order := range orders {
		body, err := json.Marshal(ledgertest.ClaimBody(int64(i+1), order, 5_000))
		require.NoError(t, err)
		resp, err := impatient.Post(proc.URL+"/internal/vouchers/"+code+"/reservations", "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
			t.Logf("order %s answered %d while the row was locked", order, resp.StatusCode)
		}
	}
	time.Sleep(time.Until(locked.Add(hold))) // the settler's rounds run meanwhile
	require.NoError(t, tx.Commit(ctx))

	ledgertest.Eventually(t, 10*time.Second, func() bool {
		b := l.Books(t, code)
		st := ledgertest.RedisState(t, l.Gate, code)
		return int64(len(st.Orders)) == int64(b.Used) && st.Remaining == b.Remaining()
	}, "redis and postgres never agreed about %s", code)
	time.Sleep(2 * time.Second) // a late commit, or a late give-back, would show now
	b := l.CheckBooks(t, code)
	ledgertest.CheckRedisMatches(t, l.Gate, b, code)
	t.Logf("%d of %d orders written", b.Used, n)
}

// Changing perUserLimit while group commits are in flight deadlocked them
// (40P01 after deadlock_timeout: a whole batch answered 503, or the PATCH
// failed): the PATCH locked the voucher's row, then the customers' rows; a
// group commit locks the customers' rows, then the voucher's. Now every
// writer takes them in one order. Many writers for customers who already
// hold uses, PATCHes of perUserLimit between them: every reserve is answered
// 201 and every PATCH 200, and the books and Redis agree.
func TestPerUserLimitPatchDuringGroupCommits(t *testing.T) {
	t.Parallel()
	for _, flash := range []bool{true, false} {
		t.Run(fmt.Sprintf("flash=%v", flash), func(t *testing.T) {
			t.Parallel()
			perUserLimitPatchDuringWrites(t, flash)
		})
	}
}

// perUserLimitPatchDuringWrites is TestPerUserLimitPatchDuringGroupCommits on
// a flash voucher (group commits) or a standard one (a transaction per
// reserve, whose INSERT's foreign key takes KEY SHARE on the voucher's row
// before it locks the customer's).
func perUserLimitPatchDuringWrites(t *testing.T, flash bool) {
	l := ledgertest.New(t, ledgertest.Options{})
	code := ledgertest.NewCode(t)
	const customers, perCustomer = 32, 6
	l.CreateVoucher(t, ledgertest.Spec(code, customers*perCustomer, 100, flash))
	for c := 1; c <= customers; c++ { // every customer has a usage row
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, int64(c), fmt.Sprintf("%s-%d-0", code, c), 5_000).Status)
	}
	var wg sync.WaitGroup
	statuses := make(chan string, customers*perCustomer)
	for c := 1; c <= customers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i < perCustomer; i++ {
				r := l.Reserve(t, code, int64(c), fmt.Sprintf("%s-%d-%d", code, c, i), 5_000)
				statuses <- fmt.Sprintf("reserve %d %s", r.Status, r.Code())
			}
		}()
	}
	patched := make(chan struct{})
	go func() {
		defer close(patched)
		for i := 0; i < 20; i++ {
			r := l.Patch(t, code, map[string]any{"perUserLimit": 100 + i%2})
			statuses <- fmt.Sprintf("patch %d %s", r.Status, r.Code())
		}
	}()
	wg.Wait()
	<-patched
	close(statuses)
	counts := map[string]int{}
	for s := range statuses {
		counts[s]++
	}
	assert.Equal(t, map[string]int{"reserve 201 ": customers * (perCustomer - 1), "patch 200 ": 20}, counts)
	b := l.CheckBooks(t, code)
	if flash {
		ledgertest.CheckRedisMatches(t, l.Gate, b, code)
	}
}

// A group commit whose snapshot predates a PATCH that lowered perUserLimit
// obeyed the old limit: it could take a customer above the new one, and it
// wrote the old limit back into the customer's row. Here the group commit
// waits (on an orderId another session is inserting) after its snapshot
// while the PATCH lowers the limit from 3 to 1 for a customer who holds 1
// use; then its two claims for that customer are refused ALREADY_USED, the
// customer keeps 1 use, the row's stored limit stays 1, and Redis agrees.
func TestGroupCommitObeysPatchAfterItsSnapshot(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 3, true))
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+"-held", 5_000).Status)
	first, second := code+"-a", code+"-b"
	rs, _, err := l.Gate.Reserve(ctx, code, []gate.Item{
		{CustomerID: 1, OrderID: first, OrderAmount: 5_000}, {CustomerID: 1, OrderID: second, OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved, gate.Reserved}, rs)

	// Another session inserts first's orderId (for another voucher, so that
	// it holds no lock on this one's row) and holds it uncommitted: the
	// group commit's INSERT waits on it, after its snapshot was taken.
	other := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(other, 10, 3, false))
	tx, err := l.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at, discount_amount)
		VALUES ($1, 1, $2, 'RESERVED', now() + interval '1 hour', 0)`, other, first)
	require.NoError(t, err)
	out := make(chan []store.Written, 1)
	go func() {
		out <- l.Ledger.WriteAdmittedMany(ctx, code, []voucher.Claim{
			{CustomerID: 1, OrderID: first, OrderAmount: 5_000}, {CustomerID: 1, OrderID: second, OrderAmount: 5_000}})
	}()
	ledgertest.Eventually(t, 5*time.Second, func() bool {
		var waiting int
		require.NoError(t, l.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%ON CONFLICT (order_id) DO NOTHING%'`).Scan(&waiting))
		return waiting > 0
	}, "the group commit never waited on the other session's insert")
	require.Equal(t, http.StatusOK, l.Patch(t, code, map[string]any{"perUserLimit": 1}).Status)
	require.NoError(t, tx.Rollback(ctx))

	res := <-out
	for i, w := range res {
		assert.Equal(t, voucher.CodeAlreadyUsed, voucher.ErrorCode(w.Err), "claim %d: %v", i, w.Err)
	}
	var used, limit int
	require.NoError(t, l.Pool.QueryRow(ctx, `SELECT used_count, per_user_limit FROM voucher_customer_usage
		WHERE voucher_code = $1 AND customer_id = 1`, code).Scan(&used, &limit))
	assert.Equal(t, []int{1, 1}, []int{used, limit}, "customer 1's uses and stored limit")
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}

// pauseOnce is a Redis hook that, once armed, holds the next command until
// released: a delay injected at a seam (here, between a warmup's database
// snapshot and its load into Redis).
type pauseOnce struct {
	armed            atomic.Bool
	reached, release chan struct{}
}

func newPauseOnce() *pauseOnce {
	return &pauseOnce{reached: make(chan struct{}), release: make(chan struct{})}
}

func (p *pauseOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pauseOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if p.armed.CompareAndSwap(true, false) {
			close(p.reached)
			<-p.release
		}
		return next(ctx, cmd)
	}
}

func (p *pauseOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A warmup loads Redis from a database snapshot. What commits between that
// snapshot and the load (a write admitted before Redis lost the voucher, a
// PATCH of totalLimit) found the voucher not loaded, so its own Redis step
// did nothing, and the load installed a state without it. Now the load runs
// under the voucher's lock and catches up after it: Redis holds the order
// and the new limit's stock, as the database does.
func TestWarmupCatchesUpWithCommitsDuringTheLoad(t *testing.T) {
	t.Parallel()
	pause := newPauseOnce()
	l := ledgertest.New(t, ledgertest.Options{Hook: pause})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
	require.NoError(t, l.Ledger.Warmup(ctx, code))
	order := code + "-a"
	cl := voucher.Claim{CustomerID: 1, OrderID: order, OrderAmount: 5_000}
	rs, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 1, OrderID: order, OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, rs)
	require.NoError(t, l.Gate.Unload(ctx, code)) // Redis loses the voucher while the write is on its way

	pause.armed.Store(true)
	warmed := make(chan error, 1)
	go func() { warmed <- l.Ledger.Warmup(ctx, code) }()
	<-pause.reached // the snapshot is read; the load waits
	out := l.Ledger.WriteAdmittedMany(ctx, code, []voucher.Claim{cl})
	require.NoError(t, out[0].Err)
	patched := make(chan ledgertest.Reply, 1)
	go func() { patched <- l.Patch(t, code, map[string]any{"totalLimit": 8}) }()
	time.Sleep(300 * time.Millisecond) // the PATCH commits; its Redis step waits for the voucher's lock
	close(pause.release)
	require.NoError(t, <-warmed)
	assert.Equal(t, http.StatusOK, (<-patched).Status)

	b := l.CheckBooks(t, code)
	require.Equal(t, 8, b.Total)
	ledgertest.CheckRedisMatches(t, l.Gate, b, code)
	v, _, _, err := l.Gate.Meta(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, 8, v.TotalLimit, "redis' totalLimit")
}

// Two ledgers writing the same orders at once (a proxy's retry reaching
// another ledger), their batches in opposite orders: each insert waited on
// the other's uncommitted row, a deadlock (40P01, the whole batch 503). Rows
// are inserted in orderId order, so one waits for the other and the second is
// answered from the first's rows.
func TestOverlappingBatchesInOppositeOrder(t *testing.T) {
	t.Parallel()
	db, redisURL := devstacktest.PostgresURL(t), devstacktest.RedisURL(t)
	a := ledgertest.New(t, ledgertest.Options{DB: db, Redis: redisURL})
	b := ledgertest.New(t, ledgertest.Options{DB: db, Redis: redisURL})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	const rounds, n = 10, 40
	a.CreateVoucher(t, ledgertest.Spec(code, rounds*n, 1, true))
	for r := range rounds {
		claims := make([]voucher.Claim, n)
		items := make([]gate.Item, n)
		for i := range claims {
			claims[i] = voucher.Claim{CustomerID: int64(r*n + i + 1), OrderID: fmt.Sprintf("%s-%d-%02d", code, r, i), OrderAmount: 5_000}
			items[i] = gate.Item{CustomerID: claims[i].CustomerID, OrderID: claims[i].OrderID, OrderAmount: 5_000}
		}
		_, _, err := a.Gate.Reserve(ctx, code, items)
		require.NoError(t, err)
		reversed := slices.Clone(claims)
		slices.Reverse(reversed)
		var wg sync.WaitGroup
		var outA, outB []store.Written
		wg.Add(2)
		go func() { defer wg.Done(); outA = a.Ledger.WriteAdmittedMany(ctx, code, claims) }()
		go func() { defer wg.Done(); outB = b.Ledger.WriteAdmittedMany(ctx, code, reversed) }()
		wg.Wait()
		for i := range claims {
			assert.NoError(t, outA[i].Err, "round %d, ledger a, %s", r, claims[i].OrderID)
			assert.NoError(t, outB[i].Err, "round %d, ledger b, %s", r, reversed[i].OrderID)
		}
	}
	ledgertest.CheckRedisMatches(t, a.Gate, a.CheckBooks(t, code), code)
}

// A ledger that stops serving settles what its requests parked before it
// exits (Settler.Drain): an admission handed over with its fate unknown, whose
// grace has not passed, gets its use back when no row holds it, and one that
// a row holds stays held; neither is left for a reconcile.
func TestDrainSettlesParkedOrders(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, true))
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+"-written", 5_000).Status)
	rs, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 2, OrderID: code + "-lost", OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, rs)

	s := sale.NewSettler(l.Store, l.Gate, time.Now, l.Log)
	s.WaitAfterFault(50 * time.Millisecond)
	s.ParkFor(code, []string{code + "-written", code + "-lost"}, time.Hour)
	assert.Equal(t, 2, s.Drain(ctx))
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}

// A release (or refund) whose caller left right after it committed (a
// client's short deadline) still gives the use back in Redis: restocked ran
// its terms read under the caller's context, failed, and left Redis holding a
// use the database had freed (found by the VOPR).
func TestRestockedAfterTheCallerLeft(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
	order := code + "-a"
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, order, 5_000).Status)
	_, released, err := l.Store.Release(ctx, code, order)
	require.NoError(t, err)
	require.True(t, released)
	l.Store.ForgetTerms(code) // the terms must be read again
	left, cancel := context.WithCancel(ctx)
	cancel()
	require.NoError(t, l.Ledger.Restocked(left, code, order))
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}

// A late confirmation (the hold expired and was swept) whose caller leaves
// while its transaction waits on the voucher's row goes on and ends with the
// order CONFIRMED in the database and held in Redis: it takes its use in Redis
// first, and a payment callback's short deadline must not leave the two
// halves apart. (The VOPR found the cancelled confirmation's transaction
// committed while its caller saw a fault: CONFIRMED in the database, not held
// in Redis, and the retry answered from the row.)
func TestLateConfirmAfterTheCallerLeft(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{TTL: 300 * time.Millisecond})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
	order := code + "-a"
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, order, 5_000).Status)
	time.Sleep(400 * time.Millisecond)
	n, err := l.Jobs.Sweep(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)

	tx, err := l.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM voucher WHERE code = $1 FOR UPDATE`, code)
	require.NoError(t, err)
	impatient, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	confirmed := make(chan error, 1)
	go func() {
		_, err := l.Ledger.Confirm(impatient, code, order)
		confirmed <- err
	}()
	<-impatient.Done()
	time.Sleep(100 * time.Millisecond) // the caller has left; the row is still locked
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-confirmed, "the confirmation went on once the row was free")

	r, err := l.Store.Reservation(ctx, code, order)
	require.NoError(t, err)
	assert.Equal(t, voucher.Confirmed, r.Status)
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}

// A release or a refund whose caller leaves while its transaction waits on
// the voucher's row goes on, and ends with the use given back in the database
// and in Redis. (The VOPR, beside a CPU hog, found a release whose client left
// while its transaction committed: the ledger saw "context canceled" and
// skipped Redis's give-back, so the order stayed RELEASED in the database and
// held in Redis, and its retries were answered from the row.)
func TestReleaseAfterTheCallerLeft(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	for _, refund := range []bool{false, true} {
		code := ledgertest.NewCode(t)
		l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
		order := code + "-a"
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, order, 5_000).Status)
		if refund {
			_, err := l.Ledger.Confirm(ctx, code, order)
			require.NoError(t, err)
		}

		tx, err := l.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1 FROM voucher WHERE code = $1 FOR UPDATE`, code)
		require.NoError(t, err)
		impatient, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		ended := make(chan error, 1)
		go func() {
			if refund {
				_, err := l.Ledger.Refund(impatient, code, order)
				ended <- err
				return
			}
			ended <- l.Ledger.Release(impatient, code, order)
		}()
		<-impatient.Done()
		time.Sleep(100 * time.Millisecond) // the caller has left; the row is still locked
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, <-ended, "refund %v: it went on once the row was free", refund)
		cancel()

		r, err := l.Store.Reservation(ctx, code, order)
		require.NoError(t, err)
		assert.Contains(t, []voucher.Status{voucher.Released, voucher.Refunded}, r.Status)
		ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
		assert.EqualValues(t, 5, ledgertest.RedisState(t, l.Gate, code).Remaining, "refund %v: the use is back in Redis", refund)
	}
}

// A settler that read an order as holding a use, then held it in Redis, after
// a release committed and gave the use back in Redis in between (its own
// re-check ran before the hold), left Redis holding an order no row held,
// until the reconciler freed it (a repair: the log VOPR). It reads again what
// it held and releases what finished.
func TestSettleReadsAgainWhatItHeld(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
	order := code + "-a"
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, order, 5_000).Status)

	s := sale.NewSettler(l.Store, l.Gate, time.Now, l.Log)
	released := false
	s.SetAfterRead(func() {
		if released {
			return
		}
		released = true
		r := l.Call(t, http.MethodDelete, "/vouchers/"+code+"/reservations/"+order, nil)
		require.Equal(t, http.StatusNoContent, r.Status, r.Raw)
	})
	s.Settle(ctx, code, order)
	require.True(t, released)
	ledgertest.CheckRedisMatches(t, l.Gate, l.CheckBooks(t, code), code)
}
