package main

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
)

// warm opens the proxy's connections as it starts serving, so that the first
// second of a sale is as fast as the tenth: REDIS_WARM_CONNS Redis
// connections with every script loaded, and LEDGER_WARM_CONNS connections to
// the ledger.
// A failure is logged, not fatal: connections then open on demand.
func warm(ctx context.Context, rdb redis.UniversalClient, l *ledger.Client, cfg Config, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, ledger.WarmTimeout)
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

// warmUpCode is the voucher code of the warm-up's requests (warmUp): a valid
// code, but every request is refused by validation (customerId 0) before the
// code is looked up, so the warm-up asks no one anything.
const warmUpCode = "flashgate-warm-up"

// warmUp runs the start-up warm-up (httpx.WarmUp, WARM_REQUESTS) on a copy of
// srv whose metrics and log are its own: reserves refused by validation, on
// MAX_INFLIGHT connections at once.
// With auth on, the copy holds one token of its own, made for this start: the
// warm-up never shows a client's.
func warmUp(ctx context.Context, srv edge.Server, cfg Config, log *slog.Logger) {
	srv.Log, srv.Metrics = nil, httpx.NewMetrics("proxy")
	if srv.Token != "" || len(srv.Tokens) > 0 {
		srv.Token, srv.Tokens = rand.Text(), nil
	}
	httpx.WarmUp{
		Path: api.ReservationsPath(warmUpCode), Body: []byte(`{"customerId":0,"orderId":"warm-up","orderAmount":1}`),
		Token: srv.Token, Want: http.StatusBadRequest, Requests: cfg.WarmRequests, Conns: cfg.StartBound(),
	}.Run(ctx, srv.Handler(), log)
}
