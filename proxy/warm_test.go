package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// countCalls is a Redis hook counting the commands the proxy sends, but for
// those that set up a connection or subscribe.
type countCalls struct{ n atomic.Int64 }

func (h *countCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *countCalls) count(cmd redis.Cmder) {
	switch cmd.Name() {
	case "hello", "client", "ping", "subscribe", "psubscribe": // a connection's set-up, the change watcher
	default:
		h.n.Add(1)
	}
}

// TestWarmUpServesItselfAndTouchesNothing: the start-up warm-up (WARM_REQUESTS)
// sends every request through the proxy's own routes, with its token, on
// MAX_INFLIGHT connections at once; each is refused by validation, so neither
// the ledger nor Redis hears of it; and the proxy's metrics and log show one
// line for it, not its requests.
func TestWarmUpServesItselfAndTouchesNothing(t *testing.T) {
	var ledgerCalls atomic.Int64
	led := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ledgerCalls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer led.Close()
	redisCalls := &countCalls{}
	s := startProxy(t, stackOptions{redisURL: devstacktest.RedisURL(t), coalesce: true, redisHook: redisCalls}, led.URL)

	var logged bytes.Buffer
	srv := edge.Server{Admit: s.admit, Ledger: ledger.NewClient(led.URL, "test-token", 0), Token: "edge-token",
		Metrics: httpx.NewMetrics("proxy"), MaxInflight: 64, Ready: func(context.Context) error { return nil }}
	before, ledgerBefore := redisCalls.n.Load(), ledgerCalls.Load() // after the proxy's read of the voucher codes
	warmUp(context.Background(), srv, Config{Token: "edge-token", WarmRequests: 1000,
		Serving: httpx.Serving{MaxInflight: 64}}, slog.New(slog.NewJSONHandler(&logged, nil)))

	assert.Contains(t, logged.String(), `"msg":"serving warm","requests":1000,"conns":64`)
	assert.NotContains(t, logged.String(), "failed")
	assert.Equal(t, ledgerBefore, ledgerCalls.Load(), "the ledger heard of the warm-up")
	assert.Equal(t, before, redisCalls.n.Load(), "Redis heard of the warm-up")
	n, err := testutil.GatherAndCount(srv.Metrics.Registry, "flashgate_http_request_duration_seconds")
	require.NoError(t, err)
	assert.Zero(t, n, "the warm-up's requests are in the proxy's metrics")

	// With only scoped client tokens (PROXY_TOKENS), none of which may
	// reserve, the warm-up still reaches validation: it shows a token of its
	// own, made for this start, never a client's.
	logged.Reset()
	srv.Token, srv.Tokens = "", map[string]envconf.Credential{"payments": {Token: "pay-token", Scopes: []string{"settle"}}}
	warmUp(context.Background(), srv, Config{WarmRequests: 10, Serving: httpx.Serving{MaxInflight: 2}},
		slog.New(slog.NewJSONHandler(&logged, nil)))
	assert.Contains(t, logged.String(), `"msg":"serving warm","requests":10,"conns":2`)
	assert.NotContains(t, logged.String(), "failed")
}
