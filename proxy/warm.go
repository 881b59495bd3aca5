package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
)

// warmTimeout bounds the start-up warm-up: a dependency that does not answer
// by then is left to open its connections on demand.
const warmTimeout = 5 * time.Second

// keepWarmEvery is how often the proxy's ledger connections are used while
// the proxy is idle, within the transport's and the ledger's idle timeouts
// (90 s and 120 s), so that a sale an hour after the start finds them open.
const keepWarmEvery = 30 * time.Second

// warm opens the proxy's connections as it starts serving, so that the first
// second of a sale is as fast as the tenth: REDIS_WARM_CONNS Redis
// connections with every script loaded, and LEDGER_WARM_CONNS connections to
// the ledger.
// A failure is logged, not fatal: connections then open on demand.
func warm(ctx context.Context, rdb redis.UniversalClient, l *LedgerClient, cfg Config, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	start := time.Now()
	var warmed []any // what did warm, for the one line that says so
	if err := gate.Warm(ctx, rdb, cfg.RedisWarm); err != nil {
		log.Warn("redis warm-up failed (REDIS_URL): its connections open on demand", "conns", cfg.RedisWarm, "err", err)
	} else {
		warmed = append(warmed, "redis", cfg.RedisWarm)
	}
	if err := l.Warm(ctx, cfg.LedgerWarm); err != nil {
		log.Warn("ledger warm-up failed (LEDGER_URL): its connections open on demand", "conns", cfg.LedgerWarm, "err", err)
	} else {
		warmed = append(warmed, "ledger", cfg.LedgerWarm)
	}
	if warmed != nil {
		log.Info("connections warm", append(warmed, "took", time.Since(start).String())...)
	}
}

// Warm opens n connections to the ledger at once (n health checks in
// parallel): the transport keeps them idle for the next calls.
func (l *LedgerClient) Warm(ctx context.Context, n int) error {
	g, ctx := errgroup.WithContext(ctx)
	for range n {
		g.Go(func() error {
			rep, err := l.Do(ctx, "warm", http.MethodGet, api.HealthzPath, nil)
			if err == nil && rep.Status != http.StatusOK {
				err = fmt.Errorf("ledger /healthz answered %d", rep.Status)
			}
			return err
		})
	}
	return g.Wait()
}

// KeepWarm runs Warm every interval until ctx ends.
func (l *LedgerClient) KeepWarm(ctx context.Context, n int, every time.Duration) {
	if n == 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			wctx, cancel := context.WithTimeout(ctx, warmTimeout)
			_ = l.Warm(wctx, n) // a failure here is the next request's to see and answer
			cancel()
		}
	}
}

// warmUpCode is the voucher code of the warm-up's requests (warmUp): a valid
// code, but every request is refused by validation (customerId 0) before the
// code is looked up, so the warm-up asks no one anything.
const warmUpCode = "flashgate-warm-up"

// warmUp runs the start-up warm-up (httpx.WarmUp, WARM_REQUESTS) on a copy of
// srv whose metrics and log are its own: reserves refused by validation, on
// MAX_INFLIGHT connections at once.
// With auth on, the copy holds one token of its own, made for this start: the
// warm-up never shows a client's.
func warmUp(ctx context.Context, srv Server, cfg Config, log *slog.Logger) {
	srv.log, srv.metrics = nil, httpx.NewMetrics("proxy")
	if srv.token != "" || len(srv.tokens) > 0 {
		srv.token, srv.tokens = rand.Text(), nil
	}
	httpx.WarmUp{
		Path: api.ReservationsPath(warmUpCode), Body: []byte(`{"customerId":0,"orderId":"warm-up","orderAmount":1}`),
		Token: srv.token, Want: http.StatusBadRequest, Requests: cfg.WarmRequests, Conns: cfg.StartBound(),
	}.Run(ctx, srv.Handler(), log)
}
