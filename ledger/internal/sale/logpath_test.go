package sale_test

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
)

// TestLogPathSale: a 1,000-use writePath log voucher sold to 1,500 orders at
// once (500 customers over the limit, 2 orders each) through the ledger's
// reserve route (the gate, then the admissions log) ends with exactly the
// 201s in Postgres and in Redis, with the consumer stopped mid-sale and
// another member started: none lost, none doubled, no oversell.
func TestLogPathSale(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 4)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code := ledgertest.NewCode(t)
	const total = 1000
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, total, 2, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)

	stop := l.Consume(t)
	cs := ledgertest.Claims(code, 750, 2, "log")
	var created, refused atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i, c := range cs {
		if i == len(cs)/2 {
			wg.Wait()
			stop() // mid-sale: the next member starts from the committed offsets
			stop = l.Consume(t)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r := l.Reserve(t, code, c.Customer, c.Order, 5_000)
			switch r.Status {
			case http.StatusCreated:
				created.Add(1)
			case http.StatusConflict:
				refused.Add(1)
			default:
				t.Errorf("Reserve(%v) = %d %s, want 201 or 409", c, r.Status, r.Raw)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, total, created.Load(), "201s of %d orders for %d uses", len(cs), total)
	assert.EqualValues(t, len(cs)-total, refused.Load())
	l.WaitUsed(t, code, total)
	c := l.Counts(t, code)
	assert.Equal(t, total, c.Rows, "rows")
	assert.LessOrEqual(t, c.MaxPerCustomer, 2)
	st := ledgertest.RedisState(t, l.Gate, code)
	assert.EqualValues(t, 0, st.Remaining, "Redis remaining")
	assert.Len(t, st.Orders, total, "Redis orders")
}

// TestLogPathDeadLetter: admissions the database refuses when the consumer
// writes them (here: totalLimit lowered in the database behind Redis's back,
// so the CHECK fires) go to the dead-letter topic and the failed list with
// their reason, their Redis uses are dropped (the database has none), and an
// operator replays one (once the limit is back) and discards another.
func TestLogPathDeadLetter(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	cs := ledgertest.Claims(code, 10, 1, "dlt")
	ledgertest.ReserveAll(t, l.URL, code, cs) // 201 from the broker's ack: nothing is written yet
	assert.Equal(t, 0, l.Counts(t, code).Used)

	l.Exec(t, `UPDATE voucher SET total_limit = 6 WHERE code = $1`, code)
	l.Store.ForgetTerms(code)
	l.Consume(t)
	l.WaitUsed(t, code, 6)
	// The list is every test's: this test counts its own voucher's only.
	var failed []store.FailedAdmission
	deadline := time.Now().Add(10 * time.Second)
	for len(failed) < 4 && time.Now().Before(deadline) {
		failed = ledgertest.FailedOf(l.FailedPage(t, false), code)
		time.Sleep(20 * time.Millisecond)
	}
	require.Len(t, failed, 4, "failed admissions %+v", failed)
	for _, f := range failed {
		assert.Equal(t, "OUT_OF_STOCK", f.Reason)
	}
	assert.EqualValues(t, 4, testutil.ToFloat64(l.Svc.Admitted.DeadLetter))
	st := ledgertest.RedisState(t, l.Gate, code)
	assert.EqualValues(t, 0, st.Remaining)
	assert.Len(t, st.Orders, 6, "Redis holds the written orders only")

	replay, discard := failed[0].OrderID, failed[1].OrderID
	r = l.Call(t, http.MethodPost, "/admin/admissions/failed/"+code+"/"+replay+"/replay", nil)
	assert.Equal(t, http.StatusConflict, r.Status, "replay before the limit is raised: %s", r.Raw)
	// Undo the tampering, in the database and (the reconciler) in Redis: a
	// PATCH moves Redis by the change it knows of, and Redis never knew.
	l.AllowRepairs("the test lowers total_limit in the database behind Redis's back")
	l.Exec(t, `UPDATE voucher SET total_limit = 10 WHERE code = $1`, code)
	l.Store.ForgetTerms(code)
	r = l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.EqualValues(t, 4, ledgertest.RedisState(t, l.Gate, code).Remaining)
	r = l.Call(t, http.MethodPost, "/admin/admissions/failed/"+code+"/"+replay+"/replay", nil)
	assert.Equal(t, http.StatusCreated, r.Status, "replay: %s", r.Raw)
	r = l.Call(t, http.MethodPost, "/admin/admissions/failed/"+code+"/"+discard+"/discard", nil)
	assert.Equal(t, http.StatusOK, r.Status, "discard: %s", r.Raw)
	r = l.Call(t, http.MethodPost, "/admin/admissions/failed/"+code+"/"+discard+"/discard", nil)
	assert.Equal(t, http.StatusNotFound, r.Status, "discard again: %s", r.Raw)
	l.WaitUsed(t, code, 7)
	assert.Len(t, ledgertest.FailedOf(l.FailedPage(t, false), code), 2, "open failed admissions after a replay and a discard")
}

// TestLogPathWaits: an order answered 201 whose record is still in the log is
// never a 404: GET waits for its row and, with no consumer, answers 503 with
// Retry-After after sale.LogWait; confirm and release sent while it waits
// succeed once a consumer writes the row. An order never admitted is a 404
// at once.
func TestLogPathWaits(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	for i, order := range []string{"o-get", "o-confirm", "o-release"} {
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, int64(i+1), order, 5_000).Status)
	}
	base := "/vouchers/" + code + "/reservations/"

	start := time.Now()
	r = l.Call(t, http.MethodGet, base+"o-get", nil)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "GET with no consumer: %s", r.Raw)
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	assert.GreaterOrEqual(t, time.Since(start), sale.LogWait)

	start = time.Now()
	r = l.Call(t, http.MethodGet, base+"never-admitted", nil)
	assert.Equal(t, http.StatusNotFound, r.Status, "GET of an order never admitted: %s", r.Raw)
	assert.Less(t, time.Since(start), sale.LogWait)

	var wg sync.WaitGroup
	var confirmed, released ledgertest.Reply
	wg.Go(func() { confirmed = l.Call(t, http.MethodPost, base+"o-confirm/confirm", nil) })
	wg.Go(func() { released = l.Call(t, http.MethodDelete, base+"o-release", nil) })
	time.Sleep(200 * time.Millisecond) // both wait for their rows
	l.Consume(t)
	wg.Wait()
	assert.Equal(t, http.StatusOK, confirmed.Status, "confirm: %s", confirmed.Raw)
	assert.Contains(t, []int{http.StatusOK, http.StatusNoContent}, released.Status, "release: %s", released.Raw)
	r = l.Call(t, http.MethodGet, base+"o-get", nil)
	assert.Equal(t, http.StatusOK, r.Status, "GET once written: %s", r.Raw)
	l.WaitUsed(t, code, 2)
}

// TestLogPathReconcileHolds: the reconciler counts a log voucher's records
// still in the log as held: past HANGING_GRACE, with no consumer that has
// measured its lag, it frees none of their Redis holds, and the consumer
// then writes every one (Postgres = Redis = the 201s).
func TestLogPathReconcileHolds(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs(), Grace: time.Second})
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	ledgertest.ReserveAll(t, l.URL, code, ledgertest.Claims(code, 5, 1, "held"))
	time.Sleep(1500 * time.Millisecond) // past the grace
	r = l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	st := ledgertest.RedisState(t, l.Gate, code)
	assert.Len(t, st.Orders, 5, "Redis holds after a reconcile past the grace: %s", r.Raw)
	l.Consume(t)
	l.WaitUsed(t, code, 5)
}

// TestLogPathProduceFails: with no broker to take the admission, the reserve
// answers 503 with Retry-After once the producer gives up on the record, and
// its use is back in Redis: never a 201 without a durable record, and no use
// held for a record that is not in the log.
func TestLogPathProduceFails(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	k.Close() // every broker gone

	r = l.Reserve(t, code, 1, code+"-lost", 5_000)
	assert.Equal(t, http.StatusServiceUnavailable, r.Status, "reserve with no broker: %s", r.Raw)
	assert.NotEmpty(t, r.Header.Get("Retry-After"))
	st := ledgertest.RedisState(t, l.Gate, code)
	assert.EqualValues(t, 10, st.Remaining, "Redis remaining after the failed produce")
	assert.Empty(t, st.Orders)
	assert.Equal(t, 0, l.Counts(t, code).Rows)
}

// TestLogPathBrokerRestart: the broker (kfake, persisted to disk) stops and
// starts again mid-sale of a 300-use log voucher sold to 450 orders; clients
// retry a 503 with the same orderId. Once the consumer caught up, Postgres =
// Redis = the 201s exactly.
func TestLogPathBrokerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	topics := kfake.SeedTopics(4, admissions.DefaultTopic, admissions.DeadLetterTopic(admissions.DefaultTopic))
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir), kfake.SyncWrites(), topics)
	require.NoError(t, err)
	addr := k.ListenAddrs()[0]
	_, portText, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)
	var mu sync.Mutex
	t.Cleanup(func() { mu.Lock(); defer mu.Unlock(); k.Close() })

	l := ledgertest.New(t, ledgertest.Options{Kafka: []string{addr}})
	code := ledgertest.NewCode(t)
	const total = 300
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, total, 2, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	l.Consume(t)

	cs := ledgertest.Claims(code, 225, 2, "restart")
	var created atomic.Int64
	var started atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, c := range cs {
		sem <- struct{}{}
		if started.Add(1) == int64(len(cs)/3) {
			mu.Lock()
			k.Close()
			k, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir), kfake.SyncWrites(), topics)
			mu.Unlock()
			require.NoError(t, err, "restart the broker")
		}
		wg.Go(func() {
			defer func() { <-sem }()
			deadline := time.Now().Add(60 * time.Second)
			for {
				r := l.Reserve(t, code, c.Customer, c.Order, 5_000)
				if r.Status == http.StatusCreated {
					created.Add(1)
					return
				}
				if r.Status == http.StatusConflict || time.Now().After(deadline) {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, total, created.Load(), "201s")
	l.WaitUsed(t, code, total)
	c := l.Counts(t, code)
	assert.Equal(t, total, c.Active)
	st := ledgertest.RedisState(t, l.Gate, code)
	assert.EqualValues(t, 0, st.Remaining)
	assert.Len(t, st.Orders, total)
}
