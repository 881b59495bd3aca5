package sale_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/shared/gate"
)

// TestParkedOrderLeftToASettler: an admission a ledger's settler parked (its
// fate unknown: a proxy could not learn it) is not freed by any ledger's
// reconciler, however old it is, while it is parked; when that ledger dies
// with it, another ledger's settler adopts it from Redis and settles it (no
// row: its use given back) HANGING_GRACE after adopting it, with no repair.
func TestParkedOrderLeftToASettler(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{Grace: time.Millisecond})
	code := ledgertest.NewCode(t)
	l.CreateVoucher(t, ledgertest.Spec(code, 5, 1, true))
	ctx := context.Background()
	order := code + "-o"
	res, _, err := l.Gate.Reserve(ctx, code, []gate.Item{{CustomerID: 1, OrderID: order, OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, res)

	// The ledger that parked it ("dying") never settles it.
	dying := sale.NewSettler(l.Store, l.Gate, time.Now, l.Log)
	dying.ParkFor(code, []string{order}, 300*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // older than the reconciler's grace

	j := l.NewJobs(jobs.Config{HangingGrace: time.Millisecond})
	rep, err := j.Reconcile(ctx, code)
	require.NoError(t, err)
	assert.Zero(t, rep.Released, "a parked admission is left to its settler")
	assert.EqualValues(t, 4, ledgertest.RedisState(t, l.Gate, code).Remaining, "still held")

	other := sale.NewSettler(l.Store, l.Gate, time.Now, l.Log)
	time.Sleep(300 * time.Millisecond) // past the notBefore it was parked with
	n, err := other.Adopt(ctx, code, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	// A write of it may still commit: settled HANGING_GRACE after its
	// adoption, whatever notBefore it had (a proxy records its own, shorter).
	assert.Zero(t, other.Resolve(ctx), "settled at once on adoption")
	require.Eventually(t, func() bool { return other.Resolve(ctx) == 1 }, 10*time.Second, 50*time.Millisecond)
	assert.EqualValues(t, 5, ledgertest.RedisState(t, l.Gate, code).Remaining, "given back by the adopting settler")
	parked, err := l.Gate.Parked(ctx, code)
	require.NoError(t, err)
	assert.Empty(t, parked, "settled: no longer parked")
}
