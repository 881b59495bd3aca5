package gate

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()

	t.Run("twice keeps the live counter", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 100, 1)
		_, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}})
		require.NoError(t, err)

		ok, err := g.Load(ctx, code, Snapshot{Voucher: testMeta(100, 1), Remaining: 100})
		require.NoError(t, err)
		assert.False(t, ok, "second Load must not load")
		_, remaining, _, err := g.Meta(ctx, code)
		require.NoError(t, err)
		assert.EqualValues(t, 99, remaining)
		owners, _ := orderOwners(t, g, code)
		assert.Equal(t, map[string]int64{"a": 1}, owners)
	})

	t.Run("orders count users", func(t *testing.T) {
		code := testCode(t, g, "v")
		past := time.UnixMilli(time.Now().Add(-5 * time.Minute).UnixMilli()).UTC()
		load(t, g, code, 10, 2,
			Order{OrderID: "a", CustomerID: 1, AdmittedAt: past},
			Order{OrderID: "b", CustomerID: 1},
			Order{OrderID: "c", CustomerID: 2},
		)
		assert.Equal(t, map[int64]int{1: 2, 2: 1}, users(t, rdb, code))
		st, loaded, err := g.State(ctx, code)
		require.NoError(t, err)
		require.True(t, loaded)
		assert.EqualValues(t, 7, st.Remaining)
		require.Len(t, st.Orders, 3)
		assert.Equal(t, Order{OrderID: "a", CustomerID: 1, AdmittedAt: past}, st.Orders[0])
		assert.WithinDuration(t, st.Now, st.Orders[1].AdmittedAt, time.Minute, "zero AdmittedAt means Redis now")

		got, _, err := g.Reserve(ctx, code, []Item{{1, "d", testAmount}, {2, "e", testAmount}, {2, "c", testAmount}})
		require.NoError(t, err)
		assert.Equal(t, []Result{AlreadyUsed, Reserved, Duplicate}, got)
	})

	t.Run("repeated order counts once", func(t *testing.T) {
		code := testCode(t, g, "v")
		ok, err := g.Load(ctx, code, Snapshot{Voucher: testMeta(5, 2), Remaining: 4,
			Orders: []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "a", CustomerID: 1}}})
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, map[int64]int{1: 1}, users(t, rdb, code))
	})

	t.Run("meta round-trips", func(t *testing.T) {
		code := testCode(t, g, "v")
		want := testMeta(1000, 3)
		want.Code, want.DiscountAmount, want.MinOrderAmount = code, 1<<40, 0
		ok, err := g.Load(ctx, code, Snapshot{Voucher: want, Remaining: 998})
		require.NoError(t, err)
		require.True(t, ok)
		got, remaining, ok, err := g.Meta(ctx, code)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, want, got)
		assert.EqualValues(t, 998, remaining)

		want.FlashSale, want.StartsAt = false, time.Time{}
		code = testCode(t, g, "w")
		want.Code = code
		_, err = g.Load(ctx, code, Snapshot{Voucher: want, Remaining: 1})
		require.NoError(t, err)
		got, _, _, err = g.Meta(ctx, code)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	})

	t.Run("expires a day after the end", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 10, 1, Order{OrderID: "a", CustomerID: 1})
		m, _, _, err := g.Meta(ctx, code)
		require.NoError(t, err)
		want := m.EndsAt.Add(24 * time.Hour).UnixMilli()
		for _, k := range Keys(code)[:4] { // done is empty: not created
			at, err := rdb.PExpireTime(ctx, k).Result()
			require.NoError(t, err)
			assert.Equal(t, want, at.Milliseconds(), "PEXPIRETIME %s", k)
		}
	})

	t.Run("refuses bad snapshots without a call", func(t *testing.T) {
		code := testCode(t, g, "v")
		ok := testMeta(10, 1)
		noEnd := ok
		noEnd.EndsAt = time.Time{}
		noPerUser := testMeta(10, 0)
		calls := g.Calls()
		for _, snap := range []Snapshot{
			{Voucher: noEnd, Remaining: 10},
			{Voucher: noPerUser, Remaining: 10},
			{Voucher: ok, Remaining: 11},
			{Voucher: ok, Remaining: -1},
			{Voucher: ok, Remaining: 10, Orders: []Order{{OrderID: "a", CustomerID: 1}}},
			{Voucher: ok, Remaining: 8, Orders: []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "a", CustomerID: 2}}},
			{Voucher: ok, Remaining: 8, Orders: []Order{{OrderID: "", CustomerID: 1}}},
		} {
			loaded, err := g.Load(ctx, code, snap)
			assert.Error(t, err, "Load(%+v)", snap)
			assert.False(t, loaded)
		}
		assert.Equal(t, calls, g.Calls())
	})

	t.Run("refuses a sale that ended more than a day ago", func(t *testing.T) {
		code := testCode(t, g, "v")
		m := testMeta(10, 1)
		m.EndsAt = time.Now().Add(-25 * time.Hour)
		loaded, err := g.Load(ctx, code, Snapshot{Voucher: m, Remaining: 10})
		assert.Error(t, err)
		assert.False(t, loaded)
		n, err := rdb.Exists(ctx, Keys(code)...).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}
