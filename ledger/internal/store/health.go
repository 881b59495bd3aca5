package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"
)

// Health judges whether the store's pool can serve, for the readiness probe.
// /readyz is open and never shed: were each call a ping, a flood of them
// would take the pool's connections from the writes and, with Postgres slow,
// pile up behind it. So a judgement is kept for an interval and made by one
// caller at a time (the others wait for it), and a pool busy with work is
// judged from its own counters rather than by a ping that would wait for a
// connection: every connection out while they keep being handed out and no
// wait for one failed is a busy pool, not a dead one.
type Health struct {
	pool   *pgxpool.Pool
	every  time.Duration
	now    func() time.Time
	flight singleflight.Group
	pings  atomic.Int64

	mu       sync.Mutex
	at       time.Time // of the last judgement; zero: none yet
	err      error
	acquires int64 // the pool's counters at the last judgement
	canceled int64
}

// pingTimeout bounds the one ping of a judgement: a hung Postgres makes the
// probe answer 503 within it.
const pingTimeout = 500 * time.Millisecond

// Health returns the judge of s's pool, which judges at most once every
// interval.
func (s *Store) Health(every time.Duration) *Health {
	return &Health{pool: s.pool, every: every, now: time.Now}
}

// Pings returns how many pings the judgements have sent to Postgres.
func (h *Health) Pings() int64 { return h.pings.Load() }

// Check returns the last judgement while it is younger than the interval;
// otherwise one caller judges anew while the others wait for its answer
// (each until its own ctx ends).
func (h *Health) Check(ctx context.Context) error {
	h.mu.Lock()
	if !h.at.IsZero() && h.now().Sub(h.at) < h.every {
		err := h.err
		h.mu.Unlock()
		return err
	}
	h.mu.Unlock()
	// The judgement outlives a caller that gives up: the others wait for it.
	ch := h.flight.DoChan("", func() (any, error) { return nil, h.judge(context.WithoutCancel(ctx)) })
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// judge judges the pool now and keeps the judgement.
func (h *Health) judge(ctx context.Context) error {
	st := h.pool.Stat()
	acquires, canceled := st.AcquireCount(), st.CanceledAcquireCount()
	h.mu.Lock()
	working := acquires > h.acquires && canceled == h.canceled
	h.mu.Unlock()
	var err error
	if !(st.AcquiredConns() >= st.MaxConns() && working) {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		h.pings.Add(1)
		if err = h.pool.Ping(pctx); err != nil {
			err = fmt.Errorf("postgres: %w", err)
		}
		cancel()
	}
	after := h.pool.Stat() // the ping's own acquire is no sign of work
	h.mu.Lock()
	h.at, h.err = h.now(), err
	h.acquires, h.canceled = after.AcquireCount(), after.CanceledAcquireCount()
	h.mu.Unlock()
	return err
}
