package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/outbox"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/envconf"
)

// TestWebhookOutage: a receiver that answers 500 for 5 s, then 200, loses
// nothing and gets each voucher's events in order, none parked.
func TestWebhookOutage(t *testing.T) {
	t.Parallel()
	db := ledgertest.NewEventsDB(t)
	l := ledgertest.New(t, ledgertest.Options{DB: db, NoRedis: true})
	rc := ledgertest.NewReceiver(t)
	up := time.Now().Add(5 * time.Second)
	rc.FailWhile(func() bool { return time.Now().Before(up) })
	ledgertest.RunDispatcher(t, l, db, ledgertest.FastWebhook(rc.URL, 100))
	codes := []string{ledgertest.NewCode(t), ledgertest.NewCode(t), ledgertest.NewCode(t)}
	for _, code := range codes {
		l.CreateVoucher(t, ledgertest.Spec(code, 100, 1, false))
	}
	for i := range 60 {
		code := codes[i%3]
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, int64(i+1), fmt.Sprintf("%s-%d", code, i), 5_000).Status)
	}
	want := ledgertest.DBEvents(t, db)
	ledgertest.WaitFor(t, 30*time.Second, "every event delivered after the outage", func() bool { return distinct(rc.Events()) >= len(want) })
	assert.False(t, time.Now().Before(up), "delivered during the outage")
	ledgertest.CheckDelivered(t, "webhook", want, rc.Events())
	assert.Greater(t, rc.Refused.Load(), int64(10), "answers 500 during the outage")
	assert.Empty(t, parked(l, t, "failed"), "parked events")
}

// TestWebhookParkedAndRetried: a receiver that always fails gets each event
// WEBHOOK_MAX_ATTEMPTS times, then the event is parked as failed and later
// events go on (a second, healthy receiver is never held back); once the
// receiver is back, POST /admin/events/{id}/retry delivers each parked one.
func TestWebhookParkedAndRetried(t *testing.T) {
	t.Parallel()
	db := ledgertest.NewEventsDB(t)
	l := ledgertest.New(t, ledgertest.Options{DB: db, NoRedis: true, Token: "tok"})
	down, healthy := ledgertest.NewReceiver(t), ledgertest.NewReceiver(t)
	var broken atomic.Bool
	broken.Store(true)
	down.FailWhile(broken.Load)
	ledgertest.RunDispatcher(t, l, db, ledgertest.FastWebhook(down.URL, 3), ledgertest.FastWebhook(healthy.URL, 3))
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	for i := range 3 {
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, int64(i+1), fmt.Sprintf("%s-%d", code, i), 5_000).Status)
	}
	want := ledgertest.DBEvents(t, db)
	require.Len(t, want, 4)
	ledgertest.WaitFor(t, 20*time.Second, "every event parked", func() bool { return len(parked(l, t, "failed")) == len(want) })
	for _, p := range parked(l, t, "failed") {
		assert.Equal(t, 3, p.Attempts, "event %d attempts", p.ID)
		assert.Contains(t, p.LastError, "500", "event %d", p.ID)
		assert.True(t, strings.HasPrefix(p.Sink, "webhook:"+down.URL), "sink %s", p.Sink)
	}
	assert.Equal(t, int64(12), down.Refused.Load(), "4 events x 3 attempts")
	ledgertest.WaitFor(t, 10*time.Second, "the healthy receiver gets everything", func() bool { return distinct(healthy.Events()) == len(want) })
	ledgertest.CheckDelivered(t, "healthy", want, healthy.Events())

	broken.Store(false)
	for _, e := range want {
		r := l.Call(t, http.MethodPost, fmt.Sprintf("/admin/events/%d/retry", e.ID), nil)
		require.Equal(t, http.StatusAccepted, r.Status, r.Raw)
	}
	ledgertest.WaitFor(t, 10*time.Second, "retried events delivered", func() bool { return distinct(down.Events()) == len(want) })
	ledgertest.WaitFor(t, 5*time.Second, "no failure left", func() bool { return len(parked(l, t, "failed"))+len(parked(l, t, "retry")) == 0 })
	ledgertest.CheckDelivered(t, "retried", want, down.Events())
	assert.Equal(t, http.StatusNotFound, l.Call(t, http.MethodPost, fmt.Sprintf("/admin/events/%d/retry", want[0].ID), nil).Status)
	assert.Equal(t, http.StatusBadRequest, l.Call(t, http.MethodGet, "/admin/events?status=lost", nil).Status)
	assert.Equal(t, http.StatusBadRequest, l.Call(t, http.MethodPost, "/admin/events/0/retry", nil).Status)
	assert.Equal(t, http.StatusUnauthorized, ledgertest.Call(t, http.MethodGet, l.URL+"/admin/events", "", nil).Status)
}

// parked lists GET /admin/events?status=... .
func parked(l *ledgertest.Ledger, tb testing.TB, status string) []api.ParkedEvent {
	tb.Helper()
	r := l.Call(tb, http.MethodGet, "/admin/events?status="+status, nil)
	require.Equal(tb, http.StatusOK, r.Status, r.Raw)
	var page api.ParkedPage
	require.NoError(tb, json.Unmarshal([]byte(r.Raw), &page))
	return page.Events
}

// TestDispatcherTakeover is kill -9 of the delivering ledger mid-stream with
// two ledger processes: the other takes the lock within 10 s and delivers
// everything from the dead one's cursor, nothing lost, each voucher in order.
func TestDispatcherTakeover(t *testing.T) {
	t.Parallel()
	db := ledgertest.NewEventsDB(t)
	rc := ledgertest.NewReceiver(t)
	env := []string{"WEBHOOK_URLS=" + rc.URL, "WEBHOOK_SECRET=" + ledgertest.TestSecret, "WEBHOOK_BACKOFF=20ms", "WEBHOOK_BACKOFF_MAX=200ms"}
	a, b := ledgertest.StartLedger(t, db, "", env...), ledgertest.StartLedger(t, db, "", env...)
	leader := func(p *ledgertest.Process) bool {
		r, err := ledgertest.TryCall(http.MethodGet, p.URL+"/metrics", nil)
		return err == nil && strings.Contains(r.Raw, "\nflashgate_event_dispatcher_leader 1")
	}
	ledgertest.WaitFor(t, 10*time.Second, "one ledger delivers", func() bool { return leader(a) || leader(b) })
	dead, heir := a, b
	if leader(b) {
		dead, heir = b, a
	}
	assert.False(t, leader(heir), "both ledgers deliver")

	codes := []string{ledgertest.NewCode(t), ledgertest.NewCode(t), ledgertest.NewCode(t), ledgertest.NewCode(t)}
	for _, code := range codes {
		r := ledgertest.Call(t, http.MethodPost, heir.URL+"/admin/vouchers", "", ledgertest.Spec(code, 10_000, 1000, false))
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	}
	// Slow the receiver so that the kill lands with events in flight.
	rc.FailWhile(func() bool { time.Sleep(2 * time.Millisecond); return false })
	stream := func(from, n int) {
		for i := from; i < from+n; i++ {
			code := codes[i%len(codes)]
			r := ledgertest.ReserveRetrying(t, heir.URL, code, ledgertest.ClaimBody(int64(i+1), fmt.Sprintf("%s-%d", code, i), 5_000))
			require.Equal(t, http.StatusCreated, r.Status, r.Raw)
		}
	}
	stream(0, 200)
	ledgertest.WaitFor(t, 10*time.Second, "delivery under way", func() bool { return distinct(rc.Events()) > 50 })
	require.NoError(t, dead.Kill())
	killed := time.Now()
	stream(200, 200)
	ledgertest.WaitFor(t, 10*time.Second, "the other ledger takes over", func() bool { return leader(heir) })
	t.Logf("took over %v after kill -9", time.Since(killed).Round(time.Millisecond))
	want := ledgertest.DBEvents(t, db)
	ledgertest.WaitOr(t, 30*time.Second, "every event delivered", func() bool { return distinct(rc.Events()) >= len(want) }, func() {
		t.Logf("received %d distinct of %d; the heir leads: %v", distinct(rc.Events()), len(want), leader(heir))
		ledgertest.LogOutbox(t, db)
	})
	ledgertest.CheckDelivered(t, "webhook", want, rc.Events())
	t.Logf("%d events, %d deliveries (%d sent twice)", len(want), len(rc.Events()), len(rc.Events())-len(want))
}

// TestDispatcherStopFreesLock: a dispatcher told to stop (SIGTERM) closes its
// lock's connection, and another takes over at its next try.
func TestDispatcherStopFreesLock(t *testing.T) {
	t.Parallel()
	db := ledgertest.NewEventsDB(t)
	l := ledgertest.New(t, ledgertest.Options{DB: db, NoRedis: true})
	m1, m2 := outbox.NewMetrics(nil), outbox.NewMetrics(nil)
	first := outbox.NewDispatcher(l.Store, nil, l.Log, outbox.DispatcherConfig{DatabaseURL: db, Retention: time.Hour, Metrics: m1})
	stop, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); first.Run(context.Background(), stop.Done()) }()
	ledgertest.WaitFor(t, 5*time.Second, "the first leads", func() bool { return testutil.ToFloat64(m1.EventLeader) == 1 })
	second := outbox.NewDispatcher(l.Store, nil, l.Log, outbox.DispatcherConfig{DatabaseURL: db, Retention: time.Hour, Metrics: m2})
	stop2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { defer close(done2); second.Run(context.Background(), stop2.Done()) }()
	t.Cleanup(func() { cancel2(); <-done2 })
	time.Sleep(1500 * time.Millisecond)
	assert.Zero(t, testutil.ToFloat64(m2.EventLeader), "the second leads beside the first")
	cancel()
	<-done
	ledgertest.WaitFor(t, 5*time.Second, "the second takes over", func() bool { return testutil.ToFloat64(m2.EventLeader) == 1 })
}

// TestEventSettingsRefused: settings that break a promise are refused at
// start with a message naming the variable.
func TestEventSettingsRefused(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"WEBHOOK_URLS": "http://a/x"}, "WEBHOOK_SECRET"},
		{map[string]string{"WEBHOOK_URLS": "ftp://a/x", "WEBHOOK_SECRET": ledgertest.TestSecret}, "WEBHOOK_URLS"},
		{map[string]string{"WEBHOOK_URLS": "http://a/x,http://a/x?k=1", "WEBHOOK_SECRET": ledgertest.TestSecret}, "twice"},
		{map[string]string{"WEBHOOK_MAX_ATTEMPTS": "0"}, "WEBHOOK_MAX_ATTEMPTS"},
		{map[string]string{"WEBHOOK_BACKOFF": "10s", "WEBHOOK_BACKOFF_MAX": "1s"}, "WEBHOOK_BACKOFF_MAX"},
		{map[string]string{"KAFKA_BROKERS": "localhost"}, "KAFKA_BROKERS"},
		{map[string]string{"EVENT_RETENTION": "10s"}, "EVENT_RETENTION"},
		{map[string]string{"EVENTS": "off", "KAFKA_BROKERS": "k:9092"}, "EVENTS=off"},
		{map[string]string{"EVENTS": "maybe"}, "EVENTS"},
	}
	for _, c := range cases {
		_, err := outbox.ReadConfig(envconf.NewFrom(c.env))
		if assert.Error(t, err, "%v", c.env) {
			assert.Contains(t, err.Error(), c.want, "%v", c.env)
		}
	}
	got, err := outbox.ReadConfig(envconf.NewFrom(map[string]string{}))
	require.NoError(t, err)
	assert.Equal(t, outbox.Config{On: true, Topic: "flashgate.events", Retention: 168 * time.Hour,
		Webhook: outbox.WebhookConfig{MaxAttempts: 10, Timeout: 5 * time.Second, Backoff: time.Second, BackoffMax: time.Minute}}, got)
}

// TestPruneKeepsUndeliveredAndParked: pruning deletes only events every sink
// passed, older than the retention, and never a parked one.
func TestPruneKeepsUndeliveredAndParked(t *testing.T) {
	t.Parallel()
	db := ledgertest.NewEventsDB(t)
	l := ledgertest.New(t, ledgertest.Options{DB: db, NoRedis: true})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	for i := range 5 {
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, int64(i+1), fmt.Sprintf("%s-%d", code, i), 5_000).Status)
	}
	evs := ledgertest.DBEvents(t, db)
	require.Len(t, evs, 6)
	ctx := context.Background()
	l.Exec(t, `UPDATE voucher_event SET occurred_at = now() - interval '2 hours' WHERE id <= $1`, evs[4].ID)
	require.NoError(t, l.Store.Park(ctx, "webhook:x", evs[3].ID, []store.Parked{{Event: evs[1], Attempts: 3, LastError: "500"}}))
	d := outbox.NewDispatcher(l.Store, []outbox.Sink{ledgertest.FastWebhook("http://x", 1)}, l.Log, outbox.DispatcherConfig{DatabaseURL: db, Retention: time.Hour})
	d.Watermark.Store(evs[5].ID)
	d.Positions[0].Store(evs[3].ID)
	d.Prune(ctx)
	var left []int64
	for _, e := range ledgertest.DBEvents(t, db) {
		left = append(left, e.ID)
	}
	// 0, 2 and 3 pruned; 1 parked; 4 not delivered; 5 too young.
	assert.Equal(t, []int64{evs[1].ID, evs[4].ID, evs[5].ID}, left)
}

// TestWatermarkWaitsForOpenTransactions: an event whose transaction is still
// open stays above the watermark however long it waits, also when that
// transaction's xid is the newest (above the snapshot's xmax), and passes it
// once committed; a rolled-back one leaves a gap the watermark passes.
func TestWatermarkWaitsForOpenTransactions(t *testing.T) {
	t.Parallel()
	db := ledgertest.NewEventsDB(t)
	l := ledgertest.New(t, ledgertest.Options{DB: db, NoRedis: true})
	ctx := context.Background()
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 10, 1, false))
	wm, err := l.Store.AdvanceWatermark(ctx, 0, time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(1), wm, "voucher.created")

	insert := func(tx pgx.Tx) int64 {
		var id int64
		require.NoError(t, tx.QueryRow(ctx, `INSERT INTO voucher_event (type, voucher_code, data) VALUES ('voucher.updated', $1, '{}') RETURNING id`,
			code).Scan(&id))
		return id
	}
	open, err := l.Pool.Begin(ctx)
	require.NoError(t, err)
	id := insert(open)
	got, err := l.Store.AdvanceWatermark(ctx, wm, 300*time.Millisecond)
	require.ErrorIs(t, err, store.ErrWatermarkHeld)
	assert.Less(t, got, id, "watermark passed event %d of an open transaction", id)
	evs, err := l.Store.Events(ctx, 0, got, 10)
	require.NoError(t, err)
	assert.Len(t, evs, 1)
	require.NoError(t, open.Commit(ctx))
	got, err = l.Store.AdvanceWatermark(ctx, got, time.Second)
	require.NoError(t, err)
	assert.Equal(t, id, got, "committed")

	rolled, err := l.Pool.Begin(ctx)
	require.NoError(t, err)
	gap := insert(rolled)
	require.NoError(t, rolled.Rollback(ctx))
	got, err = l.Store.AdvanceWatermark(ctx, got, time.Second)
	require.NoError(t, err)
	assert.Equal(t, gap, got, "a rolled-back id is passed")
}
