package gate

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/voucher"
)

// TestReserveCheckOrder: the order's own state is decided before the voucher's
// (a held order is DUPLICATE and a finished one FINISHED whether the voucher is
// paused, not started, ended or the amount too small), then paused, the window,
// the amount, the customer's limit and the stock, in that order.
func TestReserveCheckOrder(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli()).UTC()
	const small = 1 // below testMeta's minimum

	tests := []struct {
		name   string
		change func(v *voucher.Voucher)
		// for a new order of a new customer, one of a customer at its limit,
		// and a new customer with a small amount
		fresh, atLimit, smallAmount Result
	}{
		{"live", func(v *voucher.Voucher) {}, Reserved, AlreadyUsed, TooSmall},
		{"paused", func(v *voucher.Voucher) { v.Paused = true }, Paused, Paused, Paused},
		{"paused and ended", func(v *voucher.Voucher) { v.Paused, v.EndsAt = true, now.Add(-time.Minute) }, Paused, Paused, Paused},
		{"not started", func(v *voucher.Voucher) { v.StartsAt = now.Add(time.Hour) }, NotStarted, NotStarted, NotStarted},
		{"ended", func(v *voucher.Voucher) { v.EndsAt = now.Add(-time.Minute) }, Ended, Ended, Ended},
		{"ended at this millisecond or before", func(v *voucher.Voucher) { v.EndsAt = now }, Ended, Ended, Ended},
		{"sold out", func(v *voucher.Voucher) { v.TotalLimit = 1 }, OutOfStock, AlreadyUsed, TooSmall},
		{"minimum raised", func(v *voucher.Voucher) { v.MinOrderAmount = testAmount + 1 }, TooSmall, TooSmall, TooSmall},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := testCode(t, g, "v")
			v := testMeta(10, 1)
			loadVoucher(t, g, code, v)
			// held by customer 1, finished by customer 2
			rs, _, err := g.Reserve(ctx, code, []Item{{1, "held", testAmount}, {2, "done", testAmount}})
			require.NoError(t, err)
			require.Equal(t, []Result{Reserved, Reserved}, rs)
			_, err = g.Release(ctx, code, "done")
			require.NoError(t, err)

			tt.change(&v)
			_, err = g.Update(ctx, code, v)
			require.NoError(t, err)
			items := []Item{
				{1, "held", testAmount}, // retry
				{1, "held", small},      // retry with another amount: the ledger compares
				{3, "held", testAmount}, // someone else's order id
				{2, "done", testAmount}, // retry of a finished order
				{9, "done", small},      // finished, whoever asks
				{4, "new", testAmount},
				{1, "more", testAmount}, // customer 1 is at its limit
				{5, "tiny", small},
			}
			want := []Result{Duplicate, Duplicate, OrderConflict, Finished, Finished, tt.fresh, tt.atLimit, tt.smallAmount}
			got, _, err := g.Reserve(ctx, code, items)
			require.NoError(t, err)
			assert.Equal(t, want, got, "Reserve(%v)", items)
		})
	}
}

// The amount equal to the minimum is enough; the window's start is inclusive.
func TestReserveBoundaries(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	v := testMeta(10, 5)
	v.StartsAt = time.UnixMilli(time.Now().UnixMilli()).UTC()
	loadVoucher(t, g, code, v)
	got, _, err := g.Reserve(ctx, code, []Item{{1, "a", v.MinOrderAmount}, {1, "b", v.MinOrderAmount - 1}, {1, "c", -5}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Reserved, TooSmall, TooSmall}, got)
}

// A refused item in a batch changes nothing and the next item is decided as if
// it were alone: the counter moves once per reservation.
func TestReserveRefusalsTakeNothing(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	loadVoucher(t, g, code, testMeta(3, 1))
	got, remaining, err := g.Reserve(ctx, code, []Item{{1, "a", 1}, {2, "b", testAmount}, {3, "c", 1}, {4, "d", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{TooSmall, Reserved, TooSmall, Reserved}, got)
	assert.EqualValues(t, 1, remaining)
	assert.Equal(t, map[int64]int{2: 1, 4: 1}, users(t, rdb, code))
}

func TestReserveBadAmountIsAnError(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	loadVoucher(t, g, code, testMeta(3, 1))
	keys := Keys(code)
	_, err := reserveScript.Run(ctx, rdb, keys, "1", "a", "x").Result()
	assert.ErrorContains(t, err, "orderAmount")
	_, err = reserveScript.Run(ctx, rdb, keys, "1", "a").Result()
	assert.ErrorContains(t, err, "triples")
	_, remaining := orderOwners(t, g, code)
	assert.EqualValues(t, 3, remaining)
}

// TestMetaWithoutPaused: keys loaded before pause existed (a rolling upgrade
// during a sale) have no paused field; the voucher is read as not paused
// rather than failing every reserve until the next reconcile.
func TestMetaWithoutPaused(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "legacy")
	loadVoucher(t, g, code, testMeta(10, 1))
	require.NoError(t, rdb.HDel(ctx, Keys(code)[3], "paused").Err())

	rs, _, err := g.Reserve(ctx, code, []Item{{1, "o1", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Reserved}, rs)
	m, _, loaded, err := g.Meta(ctx, code)
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.False(t, m.Paused)

	require.NoError(t, rdb.HSet(ctx, Keys(code)[3], "paused", "x").Err())
	_, _, err = g.Reserve(ctx, code, []Item{{2, "o2", testAmount}})
	assert.Error(t, err, "a paused field that is not a number is still an error")
}

// TestMetaCheckoutToken: requireCheckoutToken rides in meta through a load
// and an update, for the proxy to read; keys loaded before it existed have no
// such field and read as not requiring one. No script refuses a reserve for it.
func TestMetaCheckoutToken(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "token")
	v := testMeta(10, 1)
	v.RequireCheckoutToken = true
	loadVoucher(t, g, code, v)
	m, _, _, err := g.Meta(ctx, code)
	require.NoError(t, err)
	assert.True(t, m.RequireCheckoutToken)
	rs, _, err := g.Reserve(ctx, code, []Item{{1, "o1", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Reserved}, rs, "the gate does not check tokens: the proxy does, before it")

	v.RequireCheckoutToken = false
	_, err = g.Update(ctx, code, v)
	require.NoError(t, err)
	m, _, _, err = g.Meta(ctx, code)
	require.NoError(t, err)
	assert.False(t, m.RequireCheckoutToken)

	require.NoError(t, rdb.HDel(ctx, Keys(code)[3], "checkoutToken").Err())
	m, _, loaded, err := g.Meta(ctx, code)
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.False(t, m.RequireCheckoutToken)
}
