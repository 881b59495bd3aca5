package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/httpxtest"
)

// TestMetricsDocumented checks the ledger's metrics against the README's
// Operations table: after a flash reserve, a reconcile and a sweep every
// metric documented for the ledger is registered and (unless pending) scraped
// from /metrics, without a token, with the documented type; and every
// flashgate_* family scraped is documented.
func TestMetricsDocumented(t *testing.T) {
	tl := newTestLedger(t, ledgerOptions{token: "test-token"})

	// The ledger as main wires it: one registry, the writer's observers on it.
	m := httpx.NewMetrics("ledger")
	lm := newLedgerMetrics(m.Registry)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := NewWriter(ctx, tl.store, 256, 10*time.Second)
	w.ObserveSizes(func(n int) { lm.writeBatch.Observe(float64(n)) })
	w.ObserveCommits(func(d time.Duration) { lm.commitLatency.Observe(d.Seconds()) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	settler := NewSettler(tl.store, tl.gate, time.Now, log)
	led := NewLedger(tl.store, w, tl.gate, tl.pub, settler, log)
	jobs := NewJobs(tl.store, tl.gate, tl.pub, settler, led.Warmup, log,
		JobsConfig{ExpiryInterval: time.Hour, ReconcileInterval: time.Hour, HangingGrace: 30 * time.Second, Metrics: lm})
	srv := &Server{ledger: led, jobs: jobs, token: tl.Token, metrics: m, maxInflight: 256, ready: func(c *gin.Context) error { return tl.store.Ping(c) }}
	h := srv.Handler()
	tl.checks.addJobs(jobs)
	do := func(method, path string, body any) *httptest.ResponseRecorder {
		t.Helper()
		var rd io.Reader
		if body != nil {
			buf, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(buf)
		}
		req := httptest.NewRequest(method, path, rd)
		req.Header.Set("Authorization", "Bearer "+tl.Token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	code := newCode(t)
	rec := do(http.MethodPost, "/admin/vouchers", spec(code, 10, 1, true))
	require.Equal(t, http.StatusCreated, rec.Code, "create: %s", rec.Body)
	tl.trackFlash(code)
	rec = do(http.MethodPost, "/vouchers/"+code+"/reservations", claimBody(1, code+"-o1", 5_000))
	require.Equal(t, http.StatusCreated, rec.Code, "reserve: %s", rec.Body)
	rec = do(http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(t, http.StatusOK, rec.Code, "reconcile: %s", rec.Body)
	_, err := jobs.Sweep(ctx)
	require.NoError(t, err)
	// The event dispatcher as main builds it, with one webhook: its per-sink series.
	NewDispatcher(tl.store, []Sink{NewWebhook("http://127.0.0.1:1/hook", WebhookConfig{Metrics: lm})}, log,
		DispatcherConfig{Metrics: lm})

	httpxtest.CheckMetricsDocumented(t, h, m.Registry, "../README.md", "ledger")
}
