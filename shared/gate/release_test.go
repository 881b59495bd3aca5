package gate

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRelease(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()

	t.Run("twice gives one use back", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 2, 2)
		got, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}, {1, "b", testAmount}})
		require.NoError(t, err)
		require.Equal(t, []Result{Reserved, Reserved}, got)

		n, err := g.Release(ctx, code, "a")
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		n, err = g.Release(ctx, code, "a", "a")
		require.NoError(t, err)
		assert.Equal(t, 0, n)
		owners, remaining := orderOwners(t, g, code)
		assert.EqualValues(t, 1, remaining)
		assert.Equal(t, map[string]int64{"b": 1}, owners)
		assert.Equal(t, map[int64]int{1: 1}, users(t, rdb, code))

		n, err = g.Release(ctx, code, "b", "b")
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		assert.Empty(t, users(t, rdb, code), "a customer at 0 uses has no field")
		_, remaining = orderOwners(t, g, code)
		assert.EqualValues(t, 2, remaining)

		// A released order is finished: its retry goes to the ledger, which
		// answers from its row (issue 12; it used to reserve again).
		got, _, err = g.Reserve(ctx, code, []Item{{1, "a", testAmount}})
		require.NoError(t, err)
		assert.Equal(t, []Result{Finished}, got)
	})

	t.Run("unknown order is a no-op", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 5, 1)
		n, err := g.Release(ctx, code, "nobody")
		require.NoError(t, err)
		assert.Zero(t, n)
		_, remaining := orderOwners(t, g, code)
		assert.EqualValues(t, 5, remaining)
	})

	t.Run("not loaded creates nothing", func(t *testing.T) {
		code := testCode(t, g, "v")
		n, err := g.Release(ctx, code, "a", "b")
		require.NoError(t, err)
		assert.Zero(t, n)
		exists, err := rdb.Exists(ctx, Keys(code)...).Result()
		require.NoError(t, err)
		assert.Zero(t, exists)
	})
}

// Drop forgets an order and its customer's use but does not restock: the
// database said the use did not exist.
func TestDrop(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	load(t, g, code, 3, 1)
	got, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}, {2, "b", testAmount}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved, Reserved}, got)

	n, err := g.Drop(ctx, code, "a", "a", "nobody")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	owners, remaining := orderOwners(t, g, code)
	assert.EqualValues(t, 1, remaining, "Drop(a) = remaining %d, want 1 (no restock)", remaining)
	assert.Equal(t, map[string]int64{"b": 2}, owners)
	assert.Equal(t, map[int64]int{2: 1}, users(t, rdb, code))

	// A release after the drop finds nothing to give back.
	n, err = g.Release(ctx, code, "a")
	require.NoError(t, err)
	assert.Zero(t, n)
}

// Hold records a missing order once, counts its customer and takes a use, but
// never drives remaining below 0 and never overrides another customer's entry.
func TestHold(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	load(t, g, code, 1, 2)

	ok, err := g.Hold(ctx, code, "a", 7)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = g.Hold(ctx, code, "a", 7)
	require.NoError(t, err)
	assert.False(t, ok, "Hold(a) twice = recorded twice")
	owners, remaining := orderOwners(t, g, code)
	assert.Equal(t, map[string]int64{"a": 7}, owners)
	assert.EqualValues(t, 0, remaining)
	assert.Equal(t, map[int64]int{7: 1}, users(t, rdb, code))

	ok, err = g.Hold(ctx, code, "b", 8) // the counter is at 0: it stays there
	require.NoError(t, err)
	assert.True(t, ok)
	_, remaining = orderOwners(t, g, code)
	assert.EqualValues(t, 0, remaining)

	ok, err = g.Hold(ctx, code, "a", 9) // someone else's order: left alone
	require.NoError(t, err)
	assert.False(t, ok)
	owners, _ = orderOwners(t, g, code)
	assert.Equal(t, int64(7), owners["a"])

	ok, err = g.Hold(ctx, testCode(t, g, "none"), "a", 7) // not loaded: nothing created
	require.NoError(t, err)
	assert.False(t, ok)
}

// A limit lowered below the uses Redis holds floors remaining at 0 (update.lua's
// cap: some of them are admissions the database will refuse); giving those back
// must not lift remaining above the new limit minus the uses still held, or
// Redis would admit a use the database no longer has.
func TestGiveBackUnderALoweredLimit(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "low")
	load(t, g, code, 3, 2)
	rs, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}, {1, "b", testAmount}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved, Reserved}, rs)
	v := testMeta(1, 2)
	_, err = g.Update(ctx, code, v) // two held, the limit now 1: remaining floored at 0
	require.NoError(t, err)
	n, err := g.GiveBack(ctx, code, "a") // refused by the database: its use goes back
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, remaining := orderOwners(t, g, code)
	assert.Zero(t, remaining, "remaining with limit 1 and one order held")
	n, err = g.GiveBack(ctx, code, "b")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, remaining = orderOwners(t, g, code)
	assert.EqualValues(t, 1, remaining, "remaining with limit 1 and no order held")
}

// Holder names the customer an order holds a use for, and nothing once the
// order gave it back, for an order never seen, or for a voucher not loaded.
func TestHolder(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	customer, held, err := g.Holder(ctx, code, "a")
	require.NoError(t, err)
	assert.False(t, held, "not loaded")
	assert.Zero(t, customer)

	load(t, g, code, 2, 1)
	_, _, err = g.Reserve(ctx, code, []Item{{7, "a", testAmount}})
	require.NoError(t, err)
	customer, held, err = g.Holder(ctx, code, "a")
	require.NoError(t, err)
	assert.True(t, held)
	assert.EqualValues(t, 7, customer)
	_, held, err = g.Holder(ctx, code, "b")
	require.NoError(t, err)
	assert.False(t, held, "never seen")

	_, err = g.Release(ctx, code, "a")
	require.NoError(t, err)
	_, held, err = g.Holder(ctx, code, "a")
	require.NoError(t, err)
	assert.False(t, held, "released: finished, no use held")
}

// TestGiveBackToASoldOutVoucherPublishes: a give-back or release that takes
// remaining from 0 to more names the voucher on ChangesChannel, in the same
// script (every proxy drops its sold-out flag, which knows only the orders
// Redis held when it was set); one that leaves it above 0, or a drop, does not.
func TestGiveBackToASoldOutVoucherPublishes(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	load(t, g, code, 2, 2)
	sub := rdb.Subscribe(ctx, ChangesChannel)
	defer sub.Close()
	_, err := sub.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)
	msgs := sub.Channel()
	next := func() string { // this voucher's next change; other tests share the channel
		timeout := time.After(500 * time.Millisecond)
		for {
			select {
			case m := <-msgs:
				if m.Payload == code {
					return m.Payload
				}
			case <-timeout:
				return ""
			}
		}
	}

	got, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}, {2, "b", testAmount}, {3, "c", testAmount}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved, Reserved, OutOfStock}, got)
	n, err := g.GiveBack(ctx, code, "a")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, code, next(), "0 to 1: named")
	n, err = g.Release(ctx, code, "b")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Empty(t, next(), "1 to 2: not named")

	got, _, err = g.Reserve(ctx, code, []Item{{4, "d", testAmount}, {5, "e", testAmount}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved, Reserved}, got)
	n, err = g.Drop(ctx, code, "d")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Empty(t, next(), "a drop gives nothing back")
	n, err = g.Release(ctx, code, "e")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, code, next(), "a release from 0: named")
}

// TestTake: a late confirmation's take records the order when a use is left
// and its customer is below perUserLimit, whatever done says, and refuses
// otherwise without writing anything; a held order is a Duplicate.
func TestTake(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	load(t, g, code, 2, 1)
	_, err := rdb.HSet(ctx, Keys(code)[4], "a", "7").Result() // finished
	require.NoError(t, err)

	for _, step := range []struct {
		order    string
		customer int64
		want     Result
	}{
		{"a", 7, Reserved},  // finished: taken again
		{"a", 7, Duplicate}, // held
		{"a", 9, OrderConflict},
		{"b", 7, AlreadyUsed}, // customer 7 at perUserLimit 1
		{"c", 8, Reserved},
		{"d", 9, OutOfStock},
	} {
		got, err := g.Take(ctx, code, step.order, step.customer)
		require.NoError(t, err)
		assert.Equal(t, step.want, got, "Take(%s, %d)", step.order, step.customer)
	}
	owners, remaining := orderOwners(t, g, code)
	assert.Equal(t, map[string]int64{"a": 7, "c": 8}, owners)
	assert.EqualValues(t, 0, remaining)
	assert.Equal(t, map[int64]int{7: 1, 8: 1}, users(t, rdb, code))
	assert.False(t, rdb.HExists(ctx, Keys(code)[4], "a").Val(), "no longer finished")

	got, err := g.Take(ctx, testCode(t, g, "none"), "a", 7)
	require.NoError(t, err)
	assert.Equal(t, NotLoaded, got)
}
