package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/proxy/internal/admit"
	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/proxy/internal/limits"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// TestMetricsDocumented checks the proxy's metrics against the metrics
// table of docs/operations.md: after one flash reserve every metric documented for the
// proxy is registered and scraped from /metrics (with the edge's token: with
// edge auth on, /metrics on the client port needs one) with the documented
// type, and every flashgate_* family scraped is documented.
func TestMetricsDocumented(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})

	// The proxy as main wires it: one registry for HTTP, admission and ledger-call metrics.
	m := httpx.NewMetrics("proxy")
	lc := ledger.NewClient(s.LedgerURL, "test-token", 10*time.Second)
	lc.ObserveLatency(ledger.NewLatency(m.Registry))
	lc.ObserveBreaker(m.Registry, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	adm, err := admit.New(ctx, s.gate, lc, admit.Config{
		SoldOutTTL: 2 * time.Second, VoucherCacheTTL: 5 * time.Second, RedisTimeout: 250 * time.Millisecond,
		Coalesce: true, MaxBatch: 256, Registerer: m.Registry,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(adm.Close)
	require.NoError(t, adm.SharePeers(ctx, s.rdb, m.Registry))
	const edgeToken = "edge-token"
	srv := &edge.Server{Admit: adm, Ledger: lc, Token: edgeToken, Metrics: m, MaxInflight: 256, LatencySLO: 100 * time.Millisecond, Ready: func(context.Context) error { return nil },
		Limits: limits.New(limits.Config{EarlyRetries: true}, s.rdb, m.Registry)}
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

	withToken := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+edgeToken)
		h.ServeHTTP(w, r)
	})
	httpxtest.CheckMetricsDocumented(t, withToken, m.Registry, "docs/operations.md", "proxy")
}

// TestMetricsOffThePublicPort: with edge auth on and no METRICS_ADDR, the
// proxy's /metrics on its client port, which shows each voucher's stock
// (flashgate_voucher_remaining), is 401 without a token and 403 with a shop's
// reserve token, and served to a token holding the scope metrics; with the
// edge open (PROXY_AUTH=off) it stays open.
func TestMetricsOffThePublicPort(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true})
	code := newCode(t)
	s.createVoucher(t, code, 10, 1, true)
	const shop, scraper = "shop-token", "scraper-token"
	for _, open := range []bool{false, true} {
		m := httpx.NewMetrics("proxy")
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		adm, err := admit.New(ctx, s.gate, s.ledger, admit.Config{
			SoldOutTTL: 2 * time.Second, VoucherCacheTTL: 5 * time.Second, RedisTimeout: 250 * time.Millisecond,
			Coalesce: true, MaxBatch: 256, Registerer: m.Registry,
		}, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		t.Cleanup(adm.Close)
		srv := &edge.Server{Admit: adm, Ledger: s.ledger, Metrics: m, Ready: func(context.Context) error { return nil }}
		if !open {
			srv.Tokens = map[string]envconf.Credential{"shop": {Token: shop, Scopes: []string{"reserve"}},
				"prometheus": {Token: scraper, Scopes: []string{"metrics"}}}
		}
		h := srv.Handler()
		scrape := func(token string) (int, string) {
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w.Code, w.Body.String()
		}
		body := fmt.Sprintf(`{"customerId": %d, "orderId": "%s-o%v", "orderAmount": 5000}`, len(fmt.Sprint(open)), code, open)
		req := httptest.NewRequest(http.MethodPost, "/vouchers/"+code+"/reservations", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+shop)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		require.Equal(t, http.StatusCreated, w.Code, "reserve: %s", w.Body)

		st, got := scrape("")
		if open {
			require.Equal(t, http.StatusOK, st, "PROXY_AUTH=off: /metrics open")
			require.Contains(t, got, "flashgate_voucher_remaining")
			continue
		}
		require.Equal(t, http.StatusUnauthorized, st, "no token")
		require.NotContains(t, got, "flashgate_voucher_remaining")
		st, got = scrape(shop)
		require.Equal(t, http.StatusForbidden, st, "a reserve token")
		require.NotContains(t, got, "flashgate_voucher_remaining")
		st, got = scrape(scraper)
		require.Equal(t, http.StatusOK, st, "a metrics token")
		require.Contains(t, got, "flashgate_voucher_remaining")
	}
}
