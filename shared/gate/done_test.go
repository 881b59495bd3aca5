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
)

// finished reads State's finished ids.
func finished(tb testing.TB, g *Gate, code string) []string {
	tb.Helper()
	st, loaded, err := g.State(context.Background(), code)
	require.NoError(tb, err)
	require.True(tb, loaded)
	return st.Finished
}

// Release records the order in done (its retry is FINISHED); GiveBack and Drop
// do not (the order may be admitted again).
func TestReleaseRecordsFinished(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	load(t, g, code, 5, 1)
	got, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}, {2, "b", testAmount}, {3, "c", testAmount}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved, Reserved, Reserved}, got)

	for _, step := range []struct {
		name string
		give func(context.Context, string, ...string) (int, error)
		id   string
	}{{"Release", g.Release, "a"}, {"GiveBack", g.GiveBack, "b"}, {"Drop", g.Drop, "c"}} {
		n, err := step.give(ctx, code, step.id, step.id, "nobody")
		require.NoError(t, err)
		assert.Equal(t, 1, n, "%s(%s)", step.name, step.id)
	}
	owners, remaining := orderOwners(t, g, code)
	assert.Empty(t, owners)
	assert.EqualValues(t, 4, remaining, "Release and GiveBack restock, Drop does not")
	assert.Equal(t, []string{"a"}, finished(t, g, code), "only Release records; an unknown order is not recorded")
	done, err := rdb.HGetAll(ctx, Keys(code)[4]).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1"}, done, "done maps the order to its customer")

	// done, created by the release, expires with the other keys.
	at, err := rdb.PExpireTime(ctx, Keys(code)[0]).Result()
	require.NoError(t, err)
	dat, err := rdb.PExpireTime(ctx, Keys(code)[4]).Result()
	require.NoError(t, err)
	assert.Equal(t, at, dat)

	got, remaining, err = g.Reserve(ctx, code, []Item{{1, "a", testAmount}, {9, "a", testAmount}, {2, "b", testAmount}, {3, "c", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Finished, Finished, Reserved, Reserved}, got)
	assert.EqualValues(t, 2, remaining)
}

func TestReleaseBadModeIsAnError(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	code := testCode(t, g, "v")
	load(t, g, code, 5, 1)
	_, err := releaseScript.Run(context.Background(), rdb, Keys(code), "1", "a").Result()
	assert.ErrorContains(t, err, "mode")
}

// Hold takes an order out of done: the database says it holds a use again (a
// late confirmation).
func TestHoldLeavesDone(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	load(t, g, code, 5, 1)
	_, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}})
	require.NoError(t, err)
	_, err = g.Release(ctx, code, "a")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, finished(t, g, code))

	ok, err := g.Hold(ctx, code, "a", 1)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Empty(t, finished(t, g, code))
	got, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Duplicate}, got)
}

// Load fills done from Snapshot.Finished and refuses an order that is both.
func TestLoadFinished(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	v := testMeta(10, 1)
	ok, err := g.Load(ctx, code, Snapshot{Voucher: v, Remaining: 9,
		Orders:   []Order{{OrderID: "held", CustomerID: 1}},
		Finished: []Order{{OrderID: "refunded", CustomerID: 2}, {OrderID: "released", CustomerID: 3}, {OrderID: "released", CustomerID: 3}},
	})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []string{"refunded", "released"}, finished(t, g, code))
	at, err := rdb.PExpireTime(ctx, Keys(code)[4]).Result()
	require.NoError(t, err)
	assert.Equal(t, v.EndsAt.Add(24*time.Hour).UnixMilli(), at.Milliseconds())
	got, _, err := g.Reserve(ctx, code, []Item{{2, "refunded", testAmount}, {3, "released", 1}, {1, "held", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Finished, Finished, Duplicate}, got)

	for _, bad := range []Snapshot{
		{Voucher: v, Remaining: 9, Orders: []Order{{OrderID: "x", CustomerID: 1}}, Finished: []Order{{OrderID: "x", CustomerID: 1}}},
		{Voucher: v, Remaining: 10, Finished: []Order{{OrderID: "", CustomerID: 1}}},
		{Voucher: v, Remaining: 10, Finished: []Order{{OrderID: "y", CustomerID: 1}, {OrderID: "y", CustomerID: 2}}},
	} {
		_, err := g.Load(ctx, testCode(t, g, "bad"), bad)
		assert.Error(t, err, "Load(%+v)", bad)
	}
}

// Many releases of the same orders at once give each use back once and record
// each order once.
func TestReleaseConcurrent(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	const orders, releasers = 100, 50
	load(t, g, code, orders, 1)
	ids := make([]string, orders)
	items := make([]Item, orders)
	for i := range ids {
		ids[i] = "o" + strconv.Itoa(i)
		items[i] = Item{CustomerID: int64(i + 1), OrderID: ids[i], OrderAmount: testAmount}
	}
	rs, _, err := g.Reserve(ctx, code, items)
	require.NoError(t, err)
	require.NotContains(t, rs, OutOfStock)

	var released atomic.Int64
	var wg sync.WaitGroup
	for w := range releasers {
		wg.Go(func() {
			give := g.Release
			if w%3 == 0 {
				give = g.GiveBack // racing a failed write's give-back
			}
			n, err := give(ctx, code, ids...)
			if err != nil {
				t.Errorf("release = %v", err)
			}
			released.Add(int64(n))
		})
	}
	wg.Wait()
	assert.EqualValues(t, orders, released.Load())
	owners, remaining := orderOwners(t, g, code)
	assert.Empty(t, owners)
	assert.EqualValues(t, orders, remaining)
	assert.Empty(t, users(t, rdb, code))
	assert.LessOrEqual(t, len(finished(t, g, code)), orders)
}

// Hold on a voucher whose orders and users hashes do not exist (no order held
// yet, or all given back) creates them with the counter's expiry, as every
// script that writes them does: a finished sale leaves nothing behind.
func TestHoldKeepsTTL(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "ttl")
	load(t, g, code, 5, 1)
	ok, err := g.Hold(ctx, code, "a", 1)
	require.NoError(t, err)
	require.True(t, ok)
	at, err := rdb.PExpireTime(ctx, Keys(code)[0]).Result()
	require.NoError(t, err)
	require.Positive(t, at)
	for _, k := range Keys(code)[1:3] {
		kat, err := rdb.PExpireTime(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, at, kat, "%s expires with the counter", k)
	}
}
