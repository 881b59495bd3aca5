package ledger

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/flashgate/flashgate/shared/api"
)

// WarmTimeout bounds the start-up warm-up: a dependency that does not answer
// by then is left to open its connections on demand.
const WarmTimeout = 5 * time.Second

// KeepWarmEvery is how often the proxy's ledger connections are used while
// the proxy is idle, within the transport's and the ledger's idle timeouts
// (90 s and 120 s), so that a sale an hour after the start finds them open.
const KeepWarmEvery = 30 * time.Second

// Warm opens n connections to the ledger at once (n health checks in
// parallel): the transport keeps them idle for the next calls.
func (l *Client) Warm(ctx context.Context, n int) error {
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
func (l *Client) KeepWarm(ctx context.Context, n int, every time.Duration) {
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
			wctx, cancel := context.WithTimeout(ctx, WarmTimeout)
			_ = l.Warm(wctx, n) // a failure here is the next request's to see and answer
			cancel()
		}
	}
}
