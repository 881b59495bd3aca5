package gate

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/voucher"
)

// reserveMany reserves n new orders (prefix0.., customers first, first+1, ...)
// and returns how many were reserved.
func reserveMany(tb testing.TB, g *Gate, code, prefix string, first int64, n int) int {
	tb.Helper()
	reserved := 0
	for start := 0; start < n; start += 500 {
		items := make([]Item, 0, 500)
		for i := start; i < min(n, start+500); i++ {
			items = append(items, Item{CustomerID: first + int64(i), OrderID: prefix + strconv.Itoa(i), OrderAmount: testAmount})
		}
		rs, _, err := g.Reserve(context.Background(), code, items)
		require.NoError(tb, err)
		for _, r := range rs {
			if r == Reserved {
				reserved++
			}
		}
	}
	return reserved
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()

	t.Run("a raise moves remaining by the delta, once", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(1000, 1)
		loadVoucher(t, g, code, v)
		require.Equal(t, 1000, reserveMany(t, g, code, "a", 1, 1000))

		v.TotalLimit = 1500
		res, err := g.Update(ctx, code, v)
		require.NoError(t, err)
		assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 0, RemainingAfter: 500}, res)
		res, err = g.Update(ctx, code, v) // a retry of the same change
		require.NoError(t, err)
		assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 500, RemainingAfter: 500}, res)

		assert.Equal(t, 500, reserveMany(t, g, code, "b", 10_001, 600), "the raise sells exactly 500 more")
		owners, remaining := orderOwners(t, g, code)
		assert.Equal(t, 1500, len(owners))
		assert.Zero(t, remaining)
	})

	t.Run("a cut below the uses held floors at 0", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(1000, 1)
		loadVoucher(t, g, code, v)
		require.Equal(t, 1000, reserveMany(t, g, code, "a", 1, 1000))

		v.TotalLimit = 900
		res, err := g.Update(ctx, code, v)
		require.NoError(t, err)
		assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 0, RemainingAfter: 0}, res)
		// Back to 1000: the 1000 uses held still fill it (remaining never
		// exceeds the limit minus the uses held).
		v.TotalLimit = 1000
		res, err = g.Update(ctx, code, v)
		require.NoError(t, err)
		assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 0, RemainingAfter: 0}, res)
		v.TotalLimit = 1100
		res, err = g.Update(ctx, code, v)
		require.NoError(t, err)
		assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 0, RemainingAfter: 100}, res)
	})

	t.Run("a cut with stock left", func(t *testing.T) {
		code := testCode(t, g, "v")
		v := testMeta(10, 1)
		loadVoucher(t, g, code, v)
		require.Equal(t, 4, reserveMany(t, g, code, "a", 1, 4))
		v.TotalLimit = 8
		res, err := g.Update(ctx, code, v)
		require.NoError(t, err)
		assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 6, RemainingAfter: 4}, res)
	})

	t.Run("rewrites meta and every key's expiry", func(t *testing.T) {
		code := testCode(t, g, "v")
		loadVoucher(t, g, code, testMeta(10, 1))
		require.Equal(t, 2, reserveMany(t, g, code, "a", 1, 2))
		_, err := g.Release(ctx, code, "a0") // done exists
		require.NoError(t, err)

		now := time.UnixMilli(time.Now().UnixMilli()).UTC()
		v := voucher.Voucher{
			Terms: voucher.Terms{
				DiscountAmount: 7,
				MinOrderAmount: 9,
				TotalLimit:     12,
				PerUserLimit:   3,
				StartsAt:       now.Add(-time.Minute),
				EndsAt:         now.Add(48 * time.Hour),
				FlashSale:      true,
				Paused:         true,
			},
		}
		res, err := g.Update(ctx, code, v)
		require.NoError(t, err)
		assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 9, RemainingAfter: 11}, res)
		got, remaining, ok, err := g.Meta(ctx, code)
		require.NoError(t, err)
		require.True(t, ok)
		v.Code = code
		assert.Equal(t, v, got)
		assert.EqualValues(t, 11, remaining)
		want := v.EndsAt.Add(24 * time.Hour).UnixMilli()
		for _, k := range Keys(code) {
			at, err := rdb.PExpireTime(ctx, k).Result()
			require.NoError(t, err)
			assert.Equal(t, want, at.Milliseconds(), "PEXPIRETIME %s", k)
		}
	})

	t.Run("not loaded changes nothing", func(t *testing.T) {
		code := testCode(t, g, "v")
		res, err := g.Update(ctx, code, testMeta(10, 1))
		require.NoError(t, err)
		assert.Equal(t, UpdateResult{}, res)
		n, err := rdb.Exists(ctx, Keys(code)...).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})

	t.Run("refuses bad terms without a call", func(t *testing.T) {
		code := testCode(t, g, "v")
		calls := g.Calls()
		noEnd := testMeta(10, 1)
		noEnd.EndsAt = time.Time{}
		for _, v := range []voucher.Voucher{noEnd, testMeta(-1, 1), testMeta(10, 0)} {
			_, err := g.Update(ctx, code, v)
			assert.Error(t, err, "Update(%+v)", v)
		}
		_, err := g.Update(ctx, "X}", testMeta(10, 1))
		assert.Error(t, err)
		assert.Equal(t, calls, g.Calls())
	})
}

// TestUpdateDuringBurst raises 1000 -> 1500 while 200 goroutines reserve 5,000
// orders in batches: exactly 1,500 are admitted, whenever the raise lands, and
// a raise sent twice (an admin retry) counts once.
func TestUpdateDuringBurst(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	v := testMeta(1000, 1)
	loadVoucher(t, g, code, v)
	raised := v
	raised.TotalLimit = 1500

	const goroutines, batch = 200, 25
	var reserved atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for reserved.Load() < 300 {
				time.Sleep(time.Millisecond)
			}
			if _, err := g.Update(ctx, code, raised); err != nil {
				t.Errorf("Update = %v", err)
			}
		})
	}
	for w := range goroutines {
		wg.Go(func() {
			items := make([]Item, batch)
			for j := range items {
				k := w*batch + j
				items[j] = Item{CustomerID: int64(k + 1), OrderID: "o" + strconv.Itoa(k), OrderAmount: testAmount}
			}
			rs, _, err := g.Reserve(ctx, code, items)
			if err != nil {
				t.Errorf("Reserve = %v", err)
				return
			}
			for _, r := range rs {
				if r == Reserved {
					reserved.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// Whatever the interleaving, the uses left after the burst are sold now.
	reserved.Add(int64(reserveMany(t, g, code, "late", 10_001, 600)))
	assert.EqualValues(t, 1500, reserved.Load())
	assertSoldOut(t, g, rdb, code, 1500)
}

// Reconcile rewrites meta from the voucher it is given and counts remaining
// from that voucher's totalLimit.
func TestReconcileTakesCurrentTerms(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	v := testMeta(10, 1)
	loadVoucher(t, g, code, v, Order{OrderID: "a", CustomerID: 1}, Order{OrderID: "b", CustomerID: 2})
	_, err := g.Release(ctx, code, "b") // b in done
	require.NoError(t, err)

	changed := v
	changed.TotalLimit, changed.Paused, changed.EndsAt = 15, true, v.EndsAt.Add(time.Hour)
	db := []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "b", CustomerID: 2}} // b holds a use again
	res, err := g.Reconcile(ctx, code, changed, db, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 9, RemainingAfter: 13, Restored: 1, Restoring: []string{"b"}, TermsChanged: true, Released: []string{}}, res)
	got, _, _, err := g.Meta(ctx, code)
	require.NoError(t, err)
	changed.Code = code
	assert.Equal(t, changed, got)
	st, _, err := g.State(ctx, code)
	require.NoError(t, err)
	assert.Empty(t, st.Finished, "an order the database holds leaves done")
	for _, k := range Keys(code)[:4] {
		at, err := rdb.PExpireTime(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, changed.EndsAt.Add(24*time.Hour).UnixMilli(), at.Milliseconds(), "PEXPIRETIME %s", k)
	}

	res, err = g.Reconcile(ctx, code, changed, db, time.Minute)
	require.NoError(t, err)
	assert.False(t, res.TermsChanged, "the same terms twice")
	assert.EqualValues(t, 13, res.RemainingAfter)
}
