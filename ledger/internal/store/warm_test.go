package store_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/store"
)

// inProgress counts what is under way and the most that ever was at once.
type inProgress struct{ now, most atomic.Int64 }

func (p *inProgress) enter() {
	n := p.now.Add(1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
}

func (p *inProgress) leave() { p.now.Add(-1) }

// primeTracer counts the warm-up's group-commit statements in progress.
type primeTracer struct{ primes *inProgress }

func (t primeTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if d.SQL == store.GroupCommitSQL {
		t.primes.enter()
		time.Sleep(20 * time.Millisecond) // a plan that takes a while, as on a loaded machine
	}
	return context.WithValue(ctx, primeTracer{}, d.SQL == store.GroupCommitSQL)
}

func (t primeTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(primeTracer{}) == true {
		t.primes.leave()
	}
}

// TestWarmOpensOneConnectionAtATime checks that the start-up warm-up opens and
// primes its connections one after another: each is a new Postgres backend
// whose start and first plans take a CPU, and all at once they took both CPUs
// of a 2-core machine from the ledger serving beside a restarting one.
func TestWarmOpensOneConnectionAtATime(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	const n = 6
	var connects, primes inProgress
	var opened atomic.Int64
	pool := l.PoolOfItsOwn(t, func(cfg *pgxpool.Config) {
		cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
			connects.enter()
			time.Sleep(20 * time.Millisecond) // a backend's start on a loaded machine
			return nil
		}
		cfg.AfterConnect = func(context.Context, *pgx.Conn) error {
			opened.Add(1)
			connects.leave()
			return nil
		}
		cfg.ConnConfig.Tracer = primeTracer{primes: &primes}
		cfg.MaxConns = n // pgxpool's default is the CPUs, at least 4
	})

	store.New(pool, time.Minute).Warm(context.Background(), n, slog.New(slog.NewTextHandler(io.Discard, nil)))
	assert.Equal(t, int64(n), opened.Load(), "connections opened")
	assert.Equal(t, int32(n), pool.Stat().IdleConns(), "kept open, idle, once warm")
	assert.Equal(t, int64(1), connects.most.Load(), "connections opened at once")
	assert.Equal(t, int64(1), primes.most.Load(), "connections primed at once")
}
