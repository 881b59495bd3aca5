package ledger

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/shared/api"
)

// Readiness's pace: the ledger is probed every ReadyEvery, each probe given
// readyProbeTimeout, and the proxy is unready once readyFailures probes in a
// row failed.
const (
	ReadyEvery        = 500 * time.Millisecond
	readyProbeTimeout = time.Second
	readyFailures     = 3
)

// Readiness answers the proxy's /readyz from what a probe in the background
// last saw of the ledger, never from a call of the request's own: a flood of
// /readyz (it needs no token and is never shed) then reaches the ledger twice
// a second per process, whatever its size. The probe goes past the ledger
// client's circuit breaker (Client.probe): slow probes must not open
// the breaker that admitted writes and settles use. One failed probe (a
// ledger pool busy for a moment, a slow answer) does not make the proxy
// unready; readyFailures in a row (1.5 s) do, as a ledger that stays away.
type Readiness struct {
	probe  func(ctx context.Context) error
	failed atomic.Int64          // probes failed in a row
	last   atomic.Pointer[error] // the last failure's cause
}

// NewReadiness returns a readiness judged by probe (Ready: the ledger's).
func NewReadiness(probe func(ctx context.Context) error) *Readiness {
	return &Readiness{probe: probe}
}

// Ready is the probe of the ledger's /readyz.
func Ready(l *Client) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		rep, err := l.probe(ctx, api.ReadyzPath)
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if rep.Status != http.StatusOK {
			return fmt.Errorf("ledger not ready: %d", rep.Status)
		}
		return nil
	}
}

// Run probes once at once, then every ReadyEvery until ctx ends.
func (r *Readiness) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		r.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check runs one probe and records what it saw.
func (r *Readiness) Check(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
	defer cancel()
	if err := r.probe(pctx); err != nil {
		r.last.Store(&err)
		r.failed.Add(1)
		return
	}
	r.failed.Store(0)
}

// Err is nil while the ledger is taken to be ready: fewer than readyFailures
// probes in a row failed.
func (r *Readiness) Err() error {
	if r.failed.Load() < readyFailures {
		return nil
	}
	if last := r.last.Load(); last != nil {
		return *last
	}
	return fmt.Errorf("ledger not ready")
}
