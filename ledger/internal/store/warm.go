package store

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WarmTimeout bounds the start-up warm-up: a dependency that does not answer
// by then is left to open its connections on demand (readiness tells).
const WarmTimeout = 5 * time.Second

// Warm opens n pooled connections as the ledger starts serving (pgxpool
// keeps DB_MIN_CONNS open from then on) and primes each one (Prime),
// so that the first writes of a sale do not wait for connections to be dialed
// and authenticated, nor for their statements to be parsed and planned, under
// the burst. A failure is logged, not fatal: connections then open on demand.
//
// The connections open one after another: each is a new Postgres backend
// whose start and first plans take a CPU for tens of milliseconds, up to a
// few hundred on a loaded machine. Opened all at once, they took both CPUs of
// a 2-core machine for half a second while a ledger restarted in a rolling
// restart, and a group commit of the ledger serving beside it passed
// DB_TIMEOUT (a 503 in a deploy). One at a time, a starting ledger takes at
// most one CPU from those already serving.
func (s *Store) Warm(ctx context.Context, n int, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, WarmTimeout)
	defer cancel()
	start := time.Now()
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for primed := range n {
		// Each acquire while the earlier ones are held opens a new one.
		c, err := s.pool.Acquire(ctx)
		if err == nil {
			conns = append(conns, c)
			err = s.prime(ctx, c.Conn())
		}
		if err != nil {
			log.Warn("postgres warm-up failed: connections open on demand", "conns", n, "warm", primed, "err", err)
			return
		}
	}
	log.Info("postgres connections warm", "conns", n, "took", time.Since(start).String())
}
