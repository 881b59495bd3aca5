package admissions_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
)

// runLog runs l's admissions consumer and group lag measure as main runs
// them (startBackground), the measure every 100 ms, until the test ends.
func runLog(l *ledgertest.Ledger, tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { l.Svc.Lag.Run(ctx, 100*time.Millisecond) })
	wg.Go(func() { assert.NoError(tb, l.Svc.Consumer.Run(ctx)) })
	tb.Cleanup(func() { cancel(); wg.Wait() })
}

// waitLagKnown waits until l's group lag is known.
func waitLagKnown(l *ledgertest.Ledger, tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, known := l.Svc.Lag.Lag(); known {
			return
		}
		require.False(tb, time.Now().After(deadline), "the group lag is not known after 30s")
		time.Sleep(20 * time.Millisecond)
	}
}

// requireHeld reconciles code through l and requires that Redis still holds
// order (a log admission whose row is not written yet).
func requireHeld(l *ledgertest.Ledger, tb testing.TB, code, order string) {
	tb.Helper()
	r := l.Call(tb, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(tb, http.StatusOK, r.Status, r.Raw)
	held := false
	for _, o := range ledgertest.RedisState(tb, l.Gate, code).Orders {
		held = held || o.OrderID == order
	}
	assert.True(tb, held, "Redis holds %s after a reconcile past HANGING_GRACE: %s", order, r.Raw)
}

// TestLogPathGroupLagStuckMember: with two ledgers in the admissions group,
// one stuck on a record (its voucher's row locked, so its writer waits)
// while the other is caught up, the lag both report covers the stuck
// record's age, and neither ledger's reconciler frees its hold past
// HANGING_GRACE; once unstuck, the record is written.
func TestLogPathGroupLagStuckMember(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	opts := ledgertest.Options{Kafka: k.ListenAddrs(), Grace: time.Second}
	l1, l2 := ledgertest.New(t, opts), ledgertest.New(t, opts)
	stuck := ledgertest.NewCode(t)
	r := l1.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(stuck, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l1.Checks.AddFlash(stuck)
	runLog(l1, t)
	runLog(l2, t)
	// Both members have written records before (other vouchers, on both
	// partitions most likely): each one's own view is "caught up".
	for range 6 {
		warm := ledgertest.NewCode(t)
		r := l1.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(warm, 10, 1, true), WritePath: "log"})
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
		l1.Checks.AddFlash(warm)
		require.Equal(t, http.StatusCreated, l1.Reserve(t, warm, 1, warm+"-o1", 5_000).Status)
		l1.WaitUsed(t, warm, 1)
	}
	waitLagKnown(l1, t)
	waitLagKnown(l2, t)

	tx, err := l1.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(context.Background(), `SELECT 1 FROM voucher WHERE code = $1 FOR UPDATE`, stuck)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, l1.Reserve(t, stuck, 1, stuck+"-o1", 5_000).Status)
	answered := time.Now()
	time.Sleep(2500 * time.Millisecond) // past HANGING_GRACE, with a margin

	for i, l := range []*ledgertest.Ledger{l1, l2} {
		age := time.Since(answered) // read before the lag: the lag must not be younger
		lag, known := l.Svc.Lag.Lag()
		require.True(t, known, "ledger %d's lag known", i+1)
		assert.GreaterOrEqual(t, lag, age, "ledger %d's lag covers the stuck record", i+1)
		requireHeld(l, t, stuck, stuck+"-o1")
		// The settler too: the order parked as a proxy that lost its
		// answer parks it, its wait over, is not settled while its record
		// may wait in the log.
		l.Settler.ParkFor(stuck, []string{stuck + "-o1"}, 0)
		l.Settler.Resolve(context.Background())
		requireHeld(l, t, stuck, stuck+"-o1")
	}
	require.NoError(t, tx.Rollback(context.Background()))
	l1.WaitUsed(t, stuck, 1)
}

// TestLogPathGroupLagProduceInFlight: a produce the broker holds unanswered
// longer than HANGING_GRACE keeps its hold: the lag covers the oldest
// produce in flight, however caught up the group is. Once the broker
// answers, the reserve is a 201 and its row is written.
func TestLogPathGroupLagProduceInFlight(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs(), Grace: time.Second})
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	runLog(l, t)
	// A record written before: the consumer has seen the voucher caught up.
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 2, code+"-o2", 5_000).Status)
	l.WaitUsed(t, code, 1)
	waitLagKnown(l, t)
	var lag api.AdmissionsLag
	r = l.Call(t, http.MethodGet, api.RouteAdmissionsLag, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &lag))
	assert.True(t, lag.Log && lag.Known && lag.LagSeconds != nil, "GET %s = %s", api.RouteAdmissionsLag, r.Raw)

	release := make(chan struct{})
	held := make(chan struct{})
	k.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		close(held)
		k.SleepControl(func() { <-release })
		return nil, nil, false // then answered as usual
	})
	var reserved ledgertest.Reply
	var wg sync.WaitGroup
	wg.Go(func() { reserved = l.Reserve(t, code, 1, code+"-o1", 5_000) })
	<-held
	time.Sleep(2500 * time.Millisecond) // past HANGING_GRACE, with a margin
	requireHeld(l, t, code, code+"-o1")
	close(release)
	wg.Wait()
	require.Equal(t, http.StatusCreated, reserved.Status, reserved.Raw)
	l.WaitUsed(t, code, 2)
}

// TestLogPathGroupLagRevoked: a ledger whose consumer stopped while stuck on
// records (its partition revoked, taken by another ledger) reports the
// group's lag, not one that grows from the records it left: once the other
// ledger caught up, its lag is short again, and known.
func TestLogPathGroupLagRevoked(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 1)
	opts := ledgertest.Options{Kafka: k.ListenAddrs(), Grace: time.Second}
	l1, l2 := ledgertest.New(t, opts), ledgertest.New(t, opts)
	code := ledgertest.NewCode(t)
	r := l1.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l1.Checks.AddFlash(code)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { l1.Svc.Lag.Run(ctx, 100*time.Millisecond) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	ledgertest.ReserveAll(t, l1.URL, code, ledgertest.Claims(code, 5, 1, "revoked"))

	// l1's consumer as main runs it, stopped while its writer waits on the
	// voucher's row.
	tx, err := l1.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(context.Background(), `SELECT 1 FROM voucher WHERE code = $1 FOR UPDATE`, code)
	require.NoError(t, err)
	cctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); assert.NoError(t, l1.Svc.Consumer.Run(cctx)) }()
	t.Cleanup(func() { stop(); <-done })
	time.Sleep(time.Second) // it polls the records and waits on the row
	stop()
	<-done
	require.NoError(t, tx.Rollback(context.Background()))

	l2.Consume(t) // the partition is l2's now
	l2.WaitUsed(t, code, 5)
	caughtUp := time.Now()
	time.Sleep(2 * time.Second)
	lag, known := l1.Svc.Lag.Lag()
	require.True(t, known, "l1's lag known once the group caught up")
	assert.Less(t, lag, time.Since(caughtUp), "l1's lag once the group caught up")
}

// TestLogPathGroupLagBrokerDown: while the broker cannot be asked, the lag
// is not taken as caught up: it grows with the time since the last
// measurement that proved the group had consumed everything.
func TestLogPathGroupLagBrokerDown(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs(), Grace: time.Second})
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	runLog(l, t)
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+"-o1", 5_000).Status)
	l.WaitUsed(t, code, 1)
	waitLagKnown(l, t)

	k.Close()
	down := time.Now()
	time.Sleep(2500 * time.Millisecond)
	age := time.Since(down)
	lag, known := l.Svc.Lag.Lag()
	require.True(t, known, "the lag stays known, from the last measurement")
	assert.GreaterOrEqual(t, lag, age, "the lag grows while the broker is down")
}

// TestLogPathGroupLagErrorOnlyPolls: a consumer whose polls come back with
// errors only (the broker refuses its fetches) has consumed nothing: the
// lag covers the record waiting, and the reconciler keeps its hold past
// HANGING_GRACE; once the fetches succeed, it is written.
func TestLogPathGroupLagErrorOnlyPolls(t *testing.T) {
	t.Parallel()
	k := ledgertest.NewKafka(t, 1)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs(), Grace: time.Second})
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	runLog(l, t)
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 2, code+"-o2", 5_000).Status)
	l.WaitUsed(t, code, 1)
	waitLagKnown(l, t)

	var failing atomic.Bool
	failing.Store(true)
	k.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		return refusedFetch(kreq.(*kmsg.FetchRequest)), nil, true
	})
	require.Equal(t, http.StatusCreated, l.Reserve(t, code, 1, code+"-o1", 5_000).Status)
	answered := time.Now()
	time.Sleep(2500 * time.Millisecond) // past HANGING_GRACE, with a margin
	age := time.Since(answered)
	lag, known := l.Svc.Lag.Lag()
	require.True(t, known)
	assert.GreaterOrEqual(t, lag, age, "the lag covers the record the polls did not return")
	requireHeld(l, t, code, code+"-o1")
	failing.Store(false)
	l.WaitUsed(t, code, 2)
}

// refusedFetch answers req with TOPIC_AUTHORIZATION_FAILED on each of its
// partitions: an error the client returns from its poll, with no records.
func refusedFetch(req *kmsg.FetchRequest) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.Version = req.Version
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
