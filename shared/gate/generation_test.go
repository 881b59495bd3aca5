package gate

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

func TestGeneration(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "gen")
	gen := func() Generation {
		t.Helper()
		n, err := g.Generation(ctx, code)
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, GenNotLoaded, gen())
	load(t, g, code, 10, 1)
	assert.Equal(t, GenCurrent, gen(), "a load writes the generation")
	first, err := rdb.HGet(ctx, Keys(code)[3], "generation").Result()
	require.NoError(t, err)

	// A meta loaded before generations existed still serves, and a reconcile
	// brings it up to date.
	require.NoError(t, rdb.HDel(ctx, Keys(code)[3], "generation").Err())
	assert.Equal(t, GenInherited, gen())
	rs, _, err := g.Reserve(ctx, code, []Item{{1, "o1", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Reserved}, rs)
	_, err = g.Reconcile(ctx, code, testMeta(10, 1), []Order{{OrderID: "o1", CustomerID: 1}}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, GenCurrent, gen())

	// Another process's generation (a snapshot's, a failed-over master's).
	require.NoError(t, rdb.HSet(ctx, Keys(code)[3], "generation", "0123abcd:1").Err())
	assert.Equal(t, GenInherited, gen())
	require.NoError(t, g.Unload(ctx, code))
	load(t, g, code, 10, 1)
	again, err := rdb.HGet(ctx, Keys(code)[3], "generation").Result()
	require.NoError(t, err)
	assert.Equal(t, GenCurrent, gen())
	assert.NotEqual(t, first, again, "each load is a new generation")
}

// TestGenerationAfterRestart: a Redis restarted from a snapshot serves the
// snapshot's state under a new process: Generation says so until a reconcile.
func TestGenerationAfterRestart(t *testing.T) {
	t.Parallel()
	rs := devstacktest.NewRedis(t, devstack.RedisOptions{})
	rdb, err := NewClient(rs.URL(), ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	g := New(rdb)
	ctx := context.Background()
	code := "GEN-restart"
	load(t, g, code, 10, 1)
	require.NoError(t, rdb.Save(ctx).Err())
	require.NoError(t, rs.Kill())
	require.NoError(t, rs.Restart())
	n, err := g.Generation(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, GenInherited, n)
	_, err = g.Reconcile(ctx, code, testMeta(10, 1), nil, time.Minute)
	require.NoError(t, err)
	n, err = g.Generation(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, GenCurrent, n)
}

func TestReassert(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "reassert")

	n, err := g.Reassert(ctx, code, []Order{{OrderID: "o1", CustomerID: 1}})
	require.NoError(t, err)
	assert.Zero(t, n, "a voucher that is not loaded is left alone")
	assert.Zero(t, rdb.Exists(ctx, Keys(code)...).Val(), "nor created")

	load(t, g, code, 3, 2, Order{OrderID: "held", CustomerID: 1})
	_, err = g.Release(ctx, code, "held")
	require.NoError(t, err)
	rs, _, err := g.Reserve(ctx, code, []Item{{2, "other", testAmount}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved}, rs)
	// held gave its use back since (in done), other is held, lost and lost2
	// are missing (twice in the list: counted once).
	n, err = g.Reassert(ctx, code, []Order{
		{OrderID: "held", CustomerID: 1}, {OrderID: "other", CustomerID: 9},
		{OrderID: "lost", CustomerID: 3}, {OrderID: "lost2", CustomerID: 3}, {OrderID: "lost", CustomerID: 3},
	})
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	owners, remaining := orderOwners(t, g, code)
	assert.Equal(t, map[string]int64{"other": 2, "lost": 3, "lost2": 3}, owners)
	assert.Zero(t, remaining, "two uses taken from one left: floored at 0")
	assert.Equal(t, map[int64]int{2: 1, 3: 2}, users(t, rdb, code))
	ttl, err := rdb.PExpireTime(ctx, Keys(code)[0]).Result()
	require.NoError(t, err)
	assert.Positive(t, ttl, "remaining keeps its expiry")

	rs, _, err = g.Reserve(ctx, code, []Item{{3, "lost", testAmount}, {3, "new", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Duplicate, AlreadyUsed}, rs, "a reasserted order is a retry; it counts toward its customer")

	n, err = g.Reassert(ctx, code, nil)
	require.NoError(t, err)
	assert.Zero(t, n)
	_, err = g.Reassert(ctx, code, []Order{{OrderID: "x", CustomerID: 1}, {OrderID: "x", CustomerID: 2}})
	assert.Error(t, err, "an order given to two customers")
}

// A fingerprint moves with every admission and every give-back, and stays put
// through a reconcile that changes nothing (which writes a new generation).
func TestFingerprint(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "fp")
	fp := func() Fingerprint {
		t.Helper()
		f, err := g.Fingerprint(ctx, code)
		require.NoError(t, err)
		return f
	}
	assert.Equal(t, Fingerprint{}, fp(), "not loaded")
	load(t, g, code, 10, 2)
	loaded := fp()
	assert.Equal(t, Fingerprint{Loaded: true, Remaining: "10"}, loaded)
	rs, _, err := g.Reserve(ctx, code, []Item{{1, "o1", testAmount}, {1, "o2", testAmount}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved, Reserved}, rs)
	two := fp()
	assert.Equal(t, Fingerprint{Loaded: true, Remaining: "8", Orders: 2, Users: 1}, two)
	_, err = g.Reconcile(ctx, code, testMeta(10, 2), []Order{{OrderID: "o1", CustomerID: 1}, {OrderID: "o2", CustomerID: 1}}, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, two, fp(), "a reconcile that changed nothing")
	n, err := g.Release(ctx, code, "o2")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, Fingerprint{Loaded: true, Remaining: "9", Orders: 1, Users: 1, Done: 1}, fp())
}
