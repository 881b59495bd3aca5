package ledger

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadinessRidesOutOneSlowProbe: one failed probe of the ledger (a slow
// answer, a busy moment of its pool) leaves the proxy ready; readyFailures
// in a row make it unready, naming the cause; one success makes it ready
// again.
func TestReadinessRidesOutOneSlowProbe(t *testing.T) {
	var fail atomic.Bool
	r := NewReadiness(func(context.Context) error {
		if fail.Load() {
			return errors.New("ledger not ready: 503")
		}
		return nil
	})
	ctx := context.Background()
	r.Check(ctx)
	require.NoError(t, r.Err())
	fail.Store(true)
	for i := 1; i < readyFailures; i++ {
		r.Check(ctx)
		require.NoError(t, r.Err(), "after %d failed probes", i)
	}
	r.Check(ctx)
	require.ErrorContains(t, r.Err(), "ledger not ready: 503")
	fail.Store(false)
	r.Check(ctx)
	require.NoError(t, r.Err())
}
