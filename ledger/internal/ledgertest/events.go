package ledgertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/outbox"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// TestSecret signs the tests' webhooks.
const TestSecret = "test-webhook-secret-0123456789"

// NewEventsDB creates a database of its own on the shared PostgreSQL (the
// dispatcher's lock, watermark and cursors are per database) and returns its
// URL; it is dropped when the test ends.
func NewEventsDB(tb testing.TB) string {
	tb.Helper()
	return devstacktest.NewDatabase(tb)
}

// Receiver is a webhook endpoint that checks each signature and keeps every
// event it accepted, in the order they arrived. fail decides, per request,
// whether to answer 500 instead.
type Receiver struct {
	*httptest.Server
	mu       sync.Mutex
	got      []events.Event
	Refused  atomic.Int64
	BadSigs  atomic.Int64
	failFunc atomic.Pointer[func() bool]
}

func NewReceiver(tb testing.TB) *Receiver {
	tb.Helper()
	rc := &Receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := events.VerifySignature(TestSecret, r.Header.Get(events.SignatureHeader), body, 5*time.Minute); err != nil {
			rc.BadSigs.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if f := rc.failFunc.Load(); f != nil && (*f)() {
			rc.Refused.Add(1)
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		var e events.Event
		if err := json.Unmarshal(body, &e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.got = append(rc.got, e)
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	tb.Cleanup(rc.Close)
	return rc
}

// FailWhile makes the receiver answer 500 while f returns true.
func (rc *Receiver) FailWhile(f func() bool) { rc.failFunc.Store(&f) }

func (rc *Receiver) Events() []events.Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]events.Event(nil), rc.got...)
}

// DBEvents reads every event of the database at dbURL, in id order.
func DBEvents(tb testing.TB, dbURL string) []events.Event {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(tb, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, type, occurred_at, voucher_code, data FROM voucher_event ORDER BY id`)
	require.NoError(tb, err)
	evs, err := pgx.CollectRows(rows, store.ScanEvent)
	require.NoError(tb, err)
	return evs
}

// CheckDelivered asserts that got (what a sink received, in arrival order,
// duplicates allowed) holds every event of want (the database's) with the
// same content, nothing else, and each voucher's in order: no event arrived
// before every earlier event of its voucher had arrived.
func CheckDelivered(tb testing.TB, sink string, want, got []events.Event) {
	tb.Helper()
	byID := map[int64]events.Event{}
	before := map[int64]int64{} // id -> the previous id of its voucher (0: first)
	last := map[string]int64{}
	for _, e := range want {
		byID[e.ID] = e
		before[e.ID] = last[e.VoucherCode]
		last[e.VoucherCode] = e.ID
	}
	seen := map[int64]bool{}
	disorder := 0
	for _, e := range got {
		w, ok := byID[e.ID]
		if !assert.True(tb, ok, "%s: received event %d, which the database does not have", sink, e.ID) {
			continue
		}
		assert.Equal(tb, w.Type, e.Type, "%s: event %d type", sink, e.ID)
		assert.Equal(tb, w.VoucherCode, e.VoucherCode, "%s: event %d voucher", sink, e.ID)
		assert.JSONEq(tb, string(w.Data), string(e.Data), "%s: event %d data", sink, e.ID)
		assert.True(tb, w.OccurredAt.Equal(e.OccurredAt), "%s: event %d occurredAt %v, want %v", sink, e.ID, e.OccurredAt, w.OccurredAt)
		if p := before[e.ID]; p != 0 && !seen[p] {
			disorder++
			if disorder < 5 {
				tb.Errorf("%s: event %d of %s arrived before event %d of the same voucher", sink, e.ID, e.VoucherCode, p)
			}
		}
		seen[e.ID] = true
	}
	assert.Equal(tb, len(want), len(seen), "%s: distinct events received", sink)
	assert.Zero(tb, disorder, "%s: events out of their voucher's order", sink)
}

// WaitFor polls cond every 50 ms until it holds or within passes.
func WaitFor(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	WaitOr(tb, within, what, cond, func() {})
}

// WaitOr is WaitFor that runs explain (to log what the test sees) before failing.
func WaitOr(tb testing.TB, within time.Duration, what string, cond func() bool, explain func()) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			explain()
			tb.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LogOutbox logs where the outbox of the database at dbURL stands: its
// cursors, its last id, and every transaction with an xid in the cluster
// (one of them can hold the watermark back).
func LogOutbox(tb testing.TB, dbURL string) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		tb.Logf("outbox: %v", err)
		return
	}
	defer conn.Close(ctx)
	var last int64
	_ = conn.QueryRow(ctx, `SELECT last_value FROM voucher_event_id_seq`).Scan(&last)
	tb.Logf("outbox: last id %d", last)
	if rows, err := conn.Query(ctx, `SELECT name || ' at ' || position FROM event_cursor ORDER BY name`); err == nil {
		cursors, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		tb.Logf("outbox cursors: %v", cursors)
	}
	if rows, err := conn.Query(ctx, `
		SELECT datname || ' pid ' || pid || ' xid ' || backend_xid || ' ' || state || ' for ' || (now() - xact_start)::text || ': ' || left(query, 80)
		FROM pg_stat_activity WHERE backend_xid IS NOT NULL ORDER BY xact_start`); err == nil {
		txs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		tb.Logf("transactions with an xid: %v", txs)
	}
}

// RunDispatcher runs a dispatcher of l's store over sinks until the test ends.
func RunDispatcher(tb testing.TB, l *Ledger, dbURL string, sinks ...outbox.Sink) *outbox.Dispatcher {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d := outbox.NewDispatcher(l.Store, sinks, log, outbox.DispatcherConfig{DatabaseURL: dbURL, Retention: time.Hour})
	stop, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(context.Background(), stop.Done())
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return d
}

// tbWriter writes a dispatcher's warnings (parked events, batches sent
// again) into the test's log.
type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// FastWebhook is a webhook sink with the tests' short waits.
func FastWebhook(url string, attempts int) *outbox.Webhook {
	return outbox.NewWebhook(url, outbox.WebhookConfig{
		Secret: TestSecret, MaxAttempts: attempts, Timeout: 5 * time.Second,
		Backoff: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	})
}

// Feed reads the pull feed whole, page after page.
func (l *Ledger) Feed(tb testing.TB, limit int) []events.Event {
	tb.Helper()
	var all []events.Event
	after := int64(0)
	for {
		r := l.Call(tb, http.MethodGet, fmt.Sprintf("/admin/events?after=%d&limit=%d", after, limit), nil)
		require.Equal(tb, http.StatusOK, r.Status, r.Raw)
		var page api.EventPage
		require.NoError(tb, json.Unmarshal([]byte(r.Raw), &page))
		if len(page.Events) == 0 {
			return all
		}
		all = append(all, page.Events...)
		after = page.NextAfter
	}
}
