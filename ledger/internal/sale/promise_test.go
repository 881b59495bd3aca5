package sale_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// promiseBody is what a 201 of a log voucher promised, and when it came.
type promiseBody struct {
	OrderID        string `json:"orderId"`
	DiscountAmount int64  `json:"discountAmount"`
	answered       time.Time
}

// logVoucher creates a flash voucher of writePath log with s's terms.
func logVoucher(l *ledgertest.Ledger, tb testing.TB, s ledgertest.VoucherSpec) {
	tb.Helper()
	r := l.Call(tb, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: s, WritePath: "log"})
	require.Equal(tb, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(s.Code)
}

// reserve201 reserves and returns the 201's promise.
func reserve201(l *ledgertest.Ledger, tb testing.TB, code string, customer int64, order string, amount int64) promiseBody {
	tb.Helper()
	r := l.Reserve(tb, code, customer, order, amount)
	require.Equal(tb, http.StatusCreated, r.Status, "Reserve(%s/%s) = %d %s", code, order, r.Status, r.Raw)
	var p promiseBody
	require.NoError(tb, json.Unmarshal([]byte(r.Raw), &p))
	p.answered = time.Now()
	return p
}

// requireRows checks that each promise has its row, with the promised
// discount, created at its admission (before its 201) and expiring the
// hold's length (15 minutes: the tests' HOLD_TTL) after it.
func requireRows(l *ledgertest.Ledger, tb testing.TB, code string, ps []promiseBody) {
	tb.Helper()
	for _, p := range ps {
		var discount int64
		var created, expires time.Time
		err := l.Pool.QueryRow(context.Background(), `SELECT discount_amount, created_at, expires_at FROM voucher_redemption
			WHERE voucher_code = $1 AND order_id = $2 AND status = 'RESERVED'`, code, p.OrderID).Scan(&discount, &created, &expires)
		require.NoError(tb, err, "row of %s/%s", code, p.OrderID)
		assert.Equal(tb, p.DiscountAmount, discount, "discount of %s/%s", code, p.OrderID)
		assert.False(tb, created.After(p.answered), "created_at %v of %s/%s after its 201 at %v", created, code, p.OrderID, p.answered)
		assert.InDelta(tb, (15 * time.Minute).Seconds(), expires.Sub(created).Seconds(), 0.002,
			"expires_at - created_at of %s/%s", code, p.OrderID)
	}
}

// TestLogPathPromiseKept: a 201 on a log voucher is final. Three orders are
// answered 201 on each of seven log vouchers while no consumer runs; then
// each voucher is paused, ended, has its minimum or start raised, its
// perUserLimit dropped below a customer's uses, or its discount or holdTtl
// changed; the consumer then writes every order with the terms its 201
// promised (discount, and expires_at counted from admission), none is
// dead-lettered, and Redis agrees with Postgres.
func TestLogPathPromiseKept(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	changes := []struct {
		name string
		do   func(code string) ledgertest.Reply
	}{
		{"pause", func(code string) ledgertest.Reply {
			return l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/pause", nil)
		}},
		{"ended", func(code string) ledgertest.Reply {
			return l.Patch(t, code, map[string]any{"endsAt": time.Now().Add(-time.Minute)})
		}},
		{"minimum", func(code string) ledgertest.Reply { return l.Patch(t, code, map[string]any{"minOrderAmount": 500_000}) }},
		{"starts", func(code string) ledgertest.Reply {
			return l.Patch(t, code, map[string]any{"startsAt": time.Now().Add(30 * time.Minute)})
		}},
		{"perUser", func(code string) ledgertest.Reply { return l.Patch(t, code, map[string]any{"perUserLimit": 1}) }},
		{"discount", func(code string) ledgertest.Reply { return l.Patch(t, code, map[string]any{"discountAmount": 7_000}) }},
		{"holdTtl", func(code string) ledgertest.Reply { return l.Patch(t, code, map[string]any{"holdTtl": "2s"}) }},
	}
	codes := make([]string, len(changes))
	promises := make([][]promiseBody, len(changes))
	for i := range changes {
		codes[i] = ledgertest.NewCode(t)
		logVoucher(l, t, ledgertest.Spec(codes[i], 10, 2, true))
		// Customer 1 holds two uses: a perUserLimit of 1 is below them.
		for j, c := range []int64{1, 1, 2} {
			promises[i] = append(promises[i], reserve201(l, t, codes[i], c, codes[i]+"-"+string(rune('a'+j)), 200_000))
		}
	}
	for i, c := range changes {
		r := c.do(codes[i])
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", c.name, r.Raw)
	}
	l.Consume(t)
	for i, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			l.WaitUsed(t, codes[i], 3)
			requireRows(l, t, codes[i], promises[i])
			assert.Equal(t, 3, l.Counts(t, codes[i]).Active)
		})
	}
	assert.Zero(t, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
}

// TestLogPathLimitBelowLog: PATCH totalLimit below the uses held by records
// still in the admissions log is refused (LIMIT_BELOW_USED) and changes
// nothing, in Postgres or Redis; the three records are then written.
func TestLogPathLimitBelowLog(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code := ledgertest.NewCode(t)
	logVoucher(l, t, ledgertest.Spec(code, 10, 1, true))
	var ps []promiseBody
	for i := range 3 {
		ps = append(ps, reserve201(l, t, code, int64(i+1), code+"-"+string(rune('a'+i)), 5_000))
	}
	r := l.Patch(t, code, map[string]any{"totalLimit": 1})
	require.Equal(t, http.StatusConflict, r.Status, "PATCH totalLimit 1 with 3 records in the log: %s", r.Raw)
	assert.Contains(t, r.Raw, "LIMIT_BELOW_USED")
	assert.EqualValues(t, 7, ledgertest.RedisState(t, l.Gate, code).Remaining, "Redis remaining after the refused PATCH")
	v := ledgertest.View(t, l.Call(t, http.MethodGet, "/admin/vouchers/"+code, nil), http.StatusOK)
	assert.Equal(t, 10, v.TotalLimit)

	r = l.Patch(t, code, map[string]any{"totalLimit": 3})
	require.Equal(t, http.StatusOK, r.Status, "PATCH totalLimit 3, the uses held: %s", r.Raw)
	assert.EqualValues(t, 0, ledgertest.RedisState(t, l.Gate, code).Remaining)
	l.Consume(t)
	l.WaitUsed(t, code, 3)
	requireRows(l, t, code, ps)
	assert.Zero(t, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
}

// TestLogPathRetryFromPromise: while an order's record waits in the log, a
// retry of it is answered from its promise: with another amount (even one
// below the minimum) ORDER_CONFLICT, producing nothing and giving nothing
// back; with the same one the original 201, replayed. Once written, one row
// with the promised discount, and Redis holds exactly its use.
func TestLogPathRetryFromPromise(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code := ledgertest.NewCode(t)
	logVoucher(l, t, ledgertest.Spec(code, 3, 1, true))
	order := code + "-o"
	p := reserve201(l, t, code, 1, order, 5_000)
	for _, amount := range []int64{10, 7_000} {
		r := l.Reserve(t, code, 1, order, amount)
		assert.Equal(t, http.StatusConflict, r.Status, "retry at %d while the record waits: %s", amount, r.Raw)
		assert.Contains(t, r.Raw, "ORDER_CONFLICT")
	}
	r := l.Reserve(t, code, 1, order, 5_000)
	require.Equal(t, http.StatusCreated, r.Status, "same retry while the record waits: %s", r.Raw)
	assert.Equal(t, "true", r.Header.Get(api.HeaderReplayed))
	var again promiseBody
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &again))
	assert.Equal(t, p.DiscountAmount, again.DiscountAmount)

	l.Consume(t)
	l.WaitUsed(t, code, 1)
	requireRows(l, t, code, []promiseBody{p})
	// Two more customers take the two uses left, and both are written.
	reserve201(l, t, code, 2, code+"-o2", 5_000)
	reserve201(l, t, code, 3, code+"-o3", 5_000)
	l.WaitUsed(t, code, 3)
	assert.Zero(t, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
	st := ledgertest.RedisState(t, l.Gate, code)
	assert.EqualValues(t, 0, st.Remaining)
	assert.Len(t, st.Orders, 3)
}

// TestLogPathOrderOnTwoVouchers: the same orderId on two log vouchers while
// the first's record waits: the second is ORDER_CONFLICT and the use its
// claim took there is given back at once.
func TestLogPathOrderOnTwoVouchers(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	a, b := ledgertest.NewCode(t), ledgertest.NewCode(t)
	logVoucher(l, t, ledgertest.Spec(a, 5, 1, true))
	logVoucher(l, t, ledgertest.Spec(b, 5, 1, true))
	order := a + "-shared"
	reserve201(l, t, a, 1, order, 5_000)
	r := l.Reserve(t, b, 1, order, 5_000)
	assert.Equal(t, http.StatusConflict, r.Status, "the same orderId on a second log voucher: %s", r.Raw)
	assert.Contains(t, r.Raw, "ORDER_CONFLICT")
	st := ledgertest.RedisState(t, l.Gate, b)
	assert.EqualValues(t, 5, st.Remaining, "Redis remaining of the second voucher")
	assert.Empty(t, st.Orders)

	l.Consume(t)
	l.WaitUsed(t, a, 1)
	assert.Equal(t, 0, l.Counts(t, b).Rows)
	assert.Zero(t, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
	// The consumer removes them after its commit, which WaitUsed sees.
	assert.Eventually(t, func() bool {
		n, err := l.RDB.Exists(context.Background(), gate.LoggedKey(a), gate.OrderKey(order)).Result()
		return err == nil && n == 0
	}, 10*time.Second, 20*time.Millisecond, "promise keys left once the row is written")
}

// TestLogPathUnreadableRows: when the existing orders cannot be read, the
// admitted writes of a log voucher (a retry of an order whose record waits,
// and a new one) are answered 503, never 201: nothing is produced. (The
// read fails because the table is renamed, on a Postgres of the test's own.)
func TestLogPathUnreadableRows(t *testing.T) {
	t.Parallel()
	pg := devstacktest.NewPostgres(t, devstack.PostgresOptions{})
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs(), DB: pg.URL()})
	code := ledgertest.NewCode(t)
	logVoucher(l, t, ledgertest.Spec(code, 5, 2, true))
	reserve201(l, t, code, 1, code+"-o1", 5_000)

	l.Exec(t, `ALTER TABLE voucher_redemption RENAME TO voucher_redemption_away`)
	claims := []any{ledgertest.ClaimBody(1, code+"-o1", 5_000), ledgertest.ClaimBody(2, code+"-o2", 5_000)}
	r := l.Call(t, http.MethodPost, api.InternalPrefix+api.ReservationsPath(code)+"/batch", map[string]any{"claims": claims})
	l.Exec(t, `ALTER TABLE voucher_redemption_away RENAME TO voucher_redemption`)
	var batch struct{ Results []struct{ Status int } }
	if r.Status == http.StatusOK {
		require.NoError(t, json.Unmarshal([]byte(r.Raw), &batch), r.Raw)
		require.Len(t, batch.Results, 2, r.Raw)
		for i, res := range batch.Results {
			assert.Equal(t, http.StatusServiceUnavailable, res.Status, "claim %d with the rows unreadable: %s", i, r.Raw)
		}
	} else {
		assert.Equal(t, http.StatusServiceUnavailable, r.Status, r.Raw)
	}
	l.Consume(t)
	l.WaitUsed(t, code, 1)
	time.Sleep(500 * time.Millisecond) // a second record, if any, would be written by now
	assert.Equal(t, 1, l.Counts(t, code).Rows, "rows: o1 once, o2 never")
}

// TestLogPathForeignOrderGivesBack: an orderId whose row is another
// voucher's is ORDER_CONFLICT on a log voucher, and the use its claim took
// there in Redis is given back at once, as on sync.
func TestLogPathForeignOrderGivesBack(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	syncCode, logCode := ledgertest.NewCode(t), ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(syncCode, 5, 1, true))
	logVoucher(l, t, ledgertest.Spec(logCode, 5, 1, true))
	order := syncCode + "-o"
	require.Equal(t, http.StatusCreated, l.Reserve(t, syncCode, 1, order, 5_000).Status)
	// As a proxy sends it: the gate admits it (the log voucher does not hold
	// it), then the ledger's admitted write answers it.
	res, _, err := l.Gate.Reserve(context.Background(), logCode, []gate.Item{{CustomerID: 1, OrderID: order, OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, res)
	r := l.Call(t, http.MethodPost, api.InternalPrefix+api.ReservationsPath(logCode), ledgertest.ClaimBody(1, order, 5_000))
	assert.Equal(t, http.StatusConflict, r.Status, "the orderId of a sync voucher's row on a log voucher: %s", r.Raw)
	assert.Contains(t, r.Raw, "ORDER_CONFLICT")
	st := ledgertest.RedisState(t, l.Gate, logCode)
	assert.EqualValues(t, 5, st.Remaining, "Redis remaining of the log voucher")
	assert.Empty(t, st.Orders)
}

// pendingPromises starts a ledger with its admissions log and a log
// voucher, and leaves two orders of it held in Redis with pending promises
// (as a ledger that died before the broker answered leaves them): young,
// admitted now (customer 1), and old, admitted then, a minute ago (customer
// 2), both for 5,000 with a discount of 4,000.
func pendingPromises(t *testing.T) (l *ledgertest.Ledger, code, young, old string, then time.Time) {
	t.Helper()
	k := ledgertest.NewKafka(t, 2)
	l = ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code = ledgertest.NewCode(t)
	logVoucher(l, t, ledgertest.Spec(code, 5, 1, true))
	ctx := context.Background()
	young, old = code+"-young", code+"-old"
	res, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 1, OrderID: young, OrderAmount: 5_000},
		{CustomerID: 2, OrderID: old, OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved, gate.Reserved}, res)
	now := time.UnixMilli(time.Now().UnixMilli()).UTC()
	then = now.Add(-time.Minute)
	_, _, err = l.Gate.Promise(ctx, code, []gate.Promise{
		{OrderID: young, CustomerID: 1, OrderAmount: 5_000, DiscountAmount: 4_000, AdmittedAt: now, ExpiresAt: now.Add(15 * time.Minute)},
		{OrderID: old, CustomerID: 2, OrderAmount: 5_000, DiscountAmount: 4_000, AdmittedAt: then, ExpiresAt: then.Add(15 * time.Minute)},
	})
	require.NoError(t, err)
	return l, code, young, old, then
}

// TestLogPathPendingPromiseTakenOver: a promise a ledger left pending (it
// died before the broker answered) is answered 503 while it is young; past
// promiseStale, a retry of the same claim takes it over and produces its
// record with the promise's own values (201 replayed), and the consumer
// writes that row. A retry with another amount is never the one to take it
// over.
func TestLogPathPendingPromiseTakenOver(t *testing.T) {
	t.Parallel()
	l, code, young, old, then := pendingPromises(t)
	ctx := context.Background()

	r := l.Reserve(t, code, 1, young, 5_000)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "a retry of a young pending promise: %s", r.Raw)
	r = l.Reserve(t, code, 2, old, 7_000)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "another amount on a stale pending promise: %s", r.Raw)
	r = l.Reserve(t, code, 2, old, 5_000)
	require.Equal(t, http.StatusCreated, r.Status, "the same claim on a stale pending promise: %s", r.Raw)
	assert.Equal(t, "true", r.Header.Get(api.HeaderReplayed))
	assert.Contains(t, r.Raw, `"discountAmount":4000`)

	// The young one's ledger is gone too: remove its promise and hold, as a
	// produce that failed would have.
	require.NoError(t, l.Gate.Forget(ctx, code, young))
	_, err := l.Gate.GiveBack(ctx, code, young)
	require.NoError(t, err)
	l.Consume(t)
	l.WaitUsed(t, code, 1)
	requireRows(l, t, code, []promiseBody{{OrderID: old, DiscountAmount: 4_000, answered: then}})
	assert.Zero(t, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
}

// TestLogPathLeftPromiseRetaken: a promise a ledger left pending (it died
// between the promise and the broker's answer) with no retry ever coming is
// not held forever: past promiseStale the jobs produce its record again with
// its own values, the consumer writes that row, and Redis agrees with
// Postgres without a reconcile; a young pending promise and a logged one are
// left alone.
func TestLogPathLeftPromiseRetaken(t *testing.T) {
	t.Parallel()
	l, code, young, old, then := pendingPromises(t)
	ctx := context.Background()

	// As the jobs do every RetakeEvery (RetakeAll, here on this voucher
	// only: the other tests' vouchers share the database).
	n, err := l.Ledger.RetakeStale(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "retaken")
	ps, found, err := l.Gate.Promises(ctx, code, young, old)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, found)
	assert.False(t, ps[0].Logged, "a young pending promise is left to its ledger")
	assert.True(t, ps[1].Logged, "the stale promise's record is in the log")

	// The young one's ledger is alive after all: its produce failed.
	removed, err := l.Gate.Abandon(ctx, code, young)
	require.NoError(t, err)
	require.Equal(t, []string{young}, removed)
	_, err = l.Gate.GiveBack(ctx, code, young)
	require.NoError(t, err)
	l.Consume(t)
	l.WaitUsed(t, code, 1)
	requireRows(l, t, code, []promiseBody{{OrderID: old, DiscountAmount: 4_000, answered: then}})
	assert.Eventually(t, func() bool { // after its commit, which WaitUsed sees
		_, found, err := l.Gate.Promises(ctx, code, old)
		return err == nil && !found[0]
	}, 10*time.Second, 20*time.Millisecond, "the consumer removed the promise it wrote")
	assert.Zero(t, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
}

// TestLogPathConstraintDeadLetters: a record the database's own constraints
// refuse (a negative orderAmount: ck_order_amount, which no admission
// breaks) is dead-lettered as a bug, not retried forever: the records
// behind it in its partition are written. (On a Postgres of its own: the
// failed admissions it leaves are not other tests'.)
func TestLogPathConstraintDeadLetters(t *testing.T) {
	t.Parallel()
	pg := devstacktest.NewPostgres(t, devstack.PostgresOptions{})
	k := ledgertest.NewKafka(t, 1)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs(), DB: pg.URL()})
	code := ledgertest.NewCode(t)
	s := ledgertest.Spec(code, 5, 1, true)
	s.MinOrderAmount = 0
	logVoucher(l, t, s)
	p, err := admissions.NewProducer(k.ListenAddrs(), admissions.DefaultTopic, time.Now)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	now := time.Now()
	recs := []store.Logged{
		{Claim: voucher.Claim{CustomerID: 1, OrderID: code + "-bad", OrderAmount: -5}, AdmittedAt: now, ExpiresAt: now.Add(time.Hour)},
		{Claim: voucher.Claim{CustomerID: 2, OrderID: code + "-good", OrderAmount: 5_000}, DiscountAmount: 5_000,
			AdmittedAt: now, ExpiresAt: now.Add(time.Hour)},
	}
	for _, err := range p.Append(context.Background(), code, recs) {
		require.NoError(t, err)
	}
	l.Consume(t)
	l.WaitUsed(t, code, 1)
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(l.Svc.Admitted.DeadLetter) < 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.EqualValues(t, 1, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
	assert.Equal(t, 1, l.Counts(t, code).Rows)
}

// TestLogPathAbandonedRecordSkipped: a produce that reported a failure
// whose record the broker kept all the same (its promise abandoned, its use
// given back, its client answered 503) is skipped by the consumer: no row
// and no use taken a second time; and a retry's later promise of the same
// order, answered 201, is neither removed by that old record nor written
// with its values: its own record writes the row it promised.
func TestLogPathAbandonedRecordSkipped(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 1)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code := ledgertest.NewCode(t)
	logVoucher(l, t, ledgertest.Spec(code, 5, 1, true))
	ctx := context.Background()
	order := code + "-o"
	res, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 1, OrderID: order, OrderAmount: 7_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, res)
	then := time.UnixMilli(time.Now().Add(-time.Second).UnixMilli()).UTC()
	old := store.Logged{Claim: voucher.Claim{CustomerID: 1, OrderID: order, OrderAmount: 7_000}, DiscountAmount: 4_000,
		AdmittedAt: then, ExpiresAt: then.Add(15 * time.Minute)}
	_, _, err = l.Gate.Promise(ctx, code, []gate.Promise{{OrderID: order, CustomerID: 1, OrderAmount: 7_000,
		DiscountAmount: 4_000, AdmittedAt: then, ExpiresAt: old.ExpiresAt}})
	require.NoError(t, err)
	// Its produce "failed": abandoned, the use given back.
	removed, err := l.Gate.Abandon(ctx, code, order)
	require.NoError(t, err)
	require.Equal(t, []string{order}, removed)
	_, err = l.Gate.GiveBack(ctx, code, order)
	require.NoError(t, err)
	// Yet the broker kept it.
	p, err := admissions.NewProducer(k.ListenAddrs(), admissions.DefaultTopic, time.Now)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	require.NoError(t, p.Append(ctx, code, []store.Logged{old})[0])

	// The client retries with another amount: a new promise, a new 201.
	retry := reserve201(l, t, code, 1, order, 5_000)
	l.Consume(t)
	l.WaitUsed(t, code, 1)
	requireRows(l, t, code, []promiseBody{retry})
	assert.Zero(t, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
	assert.Equal(t, 1, l.Counts(t, code).Rows)
}

// TestLogPathLateConfirmCountsPromises: a late payment for an expired
// reservation of a log voucher while every use is promised by records still
// in the admissions log is refused: the use is taken in Redis, which counts
// the promises, not by the database alone, which does not. Before, the
// database confirmed it, and the consumer then dead-lettered a record whose
// client had its 201.
func TestLogPathLateConfirmCountsPromises(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 1)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs(), TTL: 300 * time.Millisecond})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	logVoucher(l, t, ledgertest.Spec(code, 2, 1, true))
	stop := l.Consume(t)
	late := code + "-late"
	reserve201(l, t, code, 1, late, 5_000)
	l.WaitUsed(t, code, 1)
	stop()
	time.Sleep(400 * time.Millisecond)
	_, err := l.Jobs.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, l.Counts(t, code).Used, "expired")

	reserve201(l, t, code, 2, code+"-b", 5_000) // both uses promised, the records in the log
	reserve201(l, t, code, 3, code+"-c", 5_000)
	r := l.Call(t, http.MethodPost, "/vouchers/"+code+"/reservations/"+late+"/confirm", nil)
	assert.Equal(t, http.StatusConflict, r.Status, "the late payment finds no use left: %s", r.Raw)
	assert.Equal(t, 0, l.Counts(t, code).Used, "the database took no use")

	l.Consume(t)
	require.Eventually(t, func() bool { return l.Counts(t, code).Rows == 3 }, 30*time.Second, 20*time.Millisecond,
		"both records written")
	assert.Zero(t, testutil.ToFloat64(l.Svc.Admitted.DeadLetter), "dead-lettered records")
}
