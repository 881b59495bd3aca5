package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// readyzTap stands between bin/proxy and the real ledger: it counts the
// ledger /readyz calls and, while slow is set, holds each for 2 s (past
// LEDGER_TIMEOUT's 1 s).
type readyzTap struct {
	URL    string
	readyz atomic.Int64
	slow   atomic.Bool
}

func newReadyzTap(tb testing.TB, ledgerURL string) *readyzTap {
	tb.Helper()
	target, err := url.Parse(ledgerURL)
	require.NoError(tb, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	t := &readyzTap{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.ReadyzPath {
			t.readyz.Add(1)
			if t.slow.Load() {
				select {
				case <-time.After(2 * time.Second):
				case <-r.Context().Done():
				}
			}
		}
		rp.ServeHTTP(w, r)
	}))
	tb.Cleanup(hs.Close)
	t.URL = hs.URL
	return t
}

// TestReadyzFloodBesideSlowLedger: 200 unauthenticated /readyz at once (and
// /healthz and /metrics beside them) at bin/proxy, while the ledger's
// /readyz takes 2 s, reach the ledger's /readyz a few times a second at
// most, not once each, and cannot open the breaker that settles use: once the
// ledger answers again, every GET of an order through the proxy is answered
// by the ledger, none 503.
func TestReadyzFloodBesideSlowLedger(t *testing.T) {
	t.Parallel()
	o := stackOptions{redisURL: devstacktest.RedisURL(t), dbURL: devstacktest.PostgresURL(t)}
	_, ledgerURL := startLedgerEnv(t, o, "SHUTDOWN_DELAY=0s")
	tap := newReadyzTap(t, ledgerURL)
	_, proxyURL := startProxyProcess(t, o.redisURL, tap.URL, "SHUTDOWN_DELAY=0s")
	code := newCode(t)
	require.Equal(t, http.StatusCreated, call(t, "POST", ledgerURL+"/admin/vouchers", "test-token", voucherBody(code, 5, 1, false)).Status)
	order := code + "-o1"
	require.Equal(t, http.StatusCreated, call(t, "POST", proxyURL+api.ReservationsPath(code), "",
		map[string]any{"customerId": 7, "orderId": order, "orderAmount": 5_000}).Status)

	tap.slow.Store(true)
	before := tap.readyz.Load()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 200 {
		path := []string{api.ReadyzPath, api.ReadyzPath, api.HealthzPath, api.MetricsPath}[i%4]
		wg.Go(func() {
			if resp, err := client.Get(proxyURL + path); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	flood := time.Since(start)
	calls := tap.readyz.Load() - before
	tap.slow.Store(false)
	want := int64(3 + 3*flood.Seconds()) // two probes a second and some
	t.Logf("200 cheap requests in %v made %d ledger /readyz calls (want at most %d)", flood.Round(time.Millisecond), calls, want)
	assert.LessOrEqual(t, calls, want, "ledger /readyz calls during the flood")

	got503 := 0
	for range 20 {
		if r := call(t, "GET", proxyURL+api.ReservationsPath(code)+"/"+order, "", nil); r.Status == http.StatusServiceUnavailable {
			got503++
		}
	}
	assert.Zero(t, got503, "GETs of an order answered 503 after the flood (the breaker opened)")
}
