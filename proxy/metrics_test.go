package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/httpxtest"
)

// TestMetricsDocumented checks the proxy's metrics against the README's
// Operations table: after one flash reserve every metric documented for the
// proxy is registered and scraped from /metrics (without a token) with the
// documented type, and every flashgate_* family scraped is documented.
func TestMetricsDocumented(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})

	// The proxy as main wires it: one registry for HTTP, admission and ledger-call metrics.
	m := httpx.NewMetrics("proxy")
	lc := NewLedgerClient(s.LedgerURL, "test-token", 10*time.Second)
	lc.ObserveLatency(newLedgerLatency(m.Registry))
	lc.ObserveBreaker(m.Registry, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	admit, err := NewAdmitter(ctx, s.gate, lc, AdmitConfig{
		SoldOutTTL: 2 * time.Second, VoucherCacheTTL: 5 * time.Second, RedisTimeout: 250 * time.Millisecond,
		Coalesce: true, MaxBatch: 256, Registerer: m.Registry,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(admit.Close)
	require.NoError(t, admit.SharePeers(ctx, s.rdb, m.Registry))
	const edgeToken = "edge-token"
	srv := &Server{admit: admit, ledger: lc, token: edgeToken, metrics: m, maxInflight: 256, latencySLO: 100 * time.Millisecond, ready: func(context.Context) error { return nil },
		limits: newLimits(LimitConfig{EarlyRetries: true}, s.rdb, m.Registry)}
	h := srv.Handler()

	code := newCode(t)
	s.createVoucher(t, code, 10, 1, true)
	body := `{"customerId": 1, "orderId": "` + code + `-o1", "orderAmount": 5000}`
	req := httptest.NewRequest(http.MethodPost, "/vouchers/"+code+"/reservations", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+edgeToken)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	require.Equal(t, http.StatusCreated, w.Code, "reserve: %s", w.Body)

	httpxtest.CheckMetricsDocumented(t, h, m.Registry, "../README.md", "proxy")
}
