package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
)

// warmTimeout bounds the start-up warm-up: a dependency that does not answer
// by then is left to open its connections on demand (readiness tells).
const WarmTimeout = 5 * time.Second

// Warm opens n pooled connections as the ledger starts serving (pgxpool
// keeps DB_MIN_CONNS open from then on) and primes each one (Prime),
// so that the first writes of a sale do not wait for connections to be dialed
// and authenticated, nor for their statements to be parsed and planned, under
// the burst. A failure is logged, not fatal: connections then open on demand.
func (s *Store) Warm(ctx context.Context, n int, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, WarmTimeout)
	defer cancel()
	start := time.Now()
	conns := make([]*pgxpool.Conn, n)
	g, gctx := errgroup.WithContext(ctx)
	for i := range conns {
		g.Go(func() error {
			c, err := s.pool.Acquire(gctx)
			if err != nil {
				return err
			}
			conns[i] = c
			return s.Prime(gctx, c.Conn())
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
