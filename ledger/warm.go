package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/flashgate/flashgate/shared/gate"
)

// warmTimeout bounds the start-up warm-up: a dependency that does not answer
// by then is left to open its connections on demand (readiness tells).
const warmTimeout = 5 * time.Second

// warmPostgres opens n pooled connections as the ledger starts serving
// (pgxpool keeps DB_MIN_CONNS open from then on) and primes each one (prime),
// so that the first writes of a sale do not wait for connections to be dialed
// and authenticated, nor for their statements to be parsed and planned, under
// the burst. A failure is logged, not fatal: connections then open on demand.
func warmPostgres(ctx context.Context, pool *pgxpool.Pool, n int, prime func(context.Context, *pgx.Conn) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	start := time.Now()
	conns := make([]*pgxpool.Conn, n)
	g, gctx := errgroup.WithContext(ctx)
	for i := range conns {
		g.Go(func() error {
			c, err := pool.Acquire(gctx)
			if err != nil {
				return err
			}
			conns[i] = c
			return prime(gctx, c.Conn())
		})
	}
	err := g.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	if err != nil {
		log.Warn("postgres warm-up failed: connections open on demand", "conns", n, "err", err)
		return
	}
	log.Info("postgres connections warm", "conns", n, "took", time.Since(start).String())
}

// warmRedis opens n Redis connections and loads the gate's scripts as the
// ledger starts serving (gate.Warm). A failure is logged, not fatal.
func warmRedis(ctx context.Context, rdb redis.UniversalClient, n int, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	start := time.Now()
	if err := gate.Warm(ctx, rdb, n); err != nil {
		log.Warn("redis warm-up failed: connections open on demand", "conns", n, "err", err)
		return
	}
	log.Info("redis connections warm", "conns", n, "took", time.Since(start).String())
}
