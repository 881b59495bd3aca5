package gate

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReserveConcurrentSingle is the flash sale: 5,000 customers at once for 100 uses.
func TestReserveConcurrentSingle(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	code := testCode(t, g, "v")
	load(t, g, code, 100, 1)
	calls := g.Calls()

	const n = 5000
	results := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, _, err := g.Reserve(context.Background(), code, []Item{{CustomerID: int64(i + 1), OrderID: "o" + strconv.Itoa(i), OrderAmount: testAmount}})
			errs[i] = err
			if err == nil {
				results[i] = res[0]
			}
		})
	}
	wg.Wait()

	counts := map[Result]int{}
	for i := range n {
		require.NoError(t, errs[i])
		counts[results[i]]++
	}
	assert.Equal(t, map[Result]int{Reserved: 100, OutOfStock: 4900}, counts)
	assert.EqualValues(t, n, g.Calls()-calls, "one script call per reservation")
	assertSoldOut(t, g, rdb, code, 100)
}

// TestReserveConcurrentBatches is the same sale through the coalescer's path. The
// second total does not divide by the batch size, so a batch straddles the last use.
func TestReserveConcurrentBatches(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	for _, total := range []int{100, 97} {
		code := testCode(t, g, strconv.Itoa(total))
		load(t, g, code, total, 1)

		const goroutines, batch = 200, 25
		results := make([][]Result, goroutines)
		errs := make([]error, goroutines)
		var wg sync.WaitGroup
		for w := range goroutines {
			wg.Go(func() {
				items := make([]Item, batch)
				for j := range items {
					k := w*batch + j
					items[j] = Item{CustomerID: int64(k + 1), OrderID: "o" + strconv.Itoa(k), OrderAmount: testAmount}
				}
				results[w], _, errs[w] = g.Reserve(context.Background(), code, items)
			})
		}
		wg.Wait()

		counts := map[Result]int{}
		for w := range goroutines {
			require.NoError(t, errs[w])
			require.Len(t, results[w], batch)
			for _, r := range results[w] {
				counts[r]++
			}
		}
		assert.Equal(t, map[Result]int{Reserved: total, OutOfStock: goroutines*batch - total}, counts)
		assertSoldOut(t, g, rdb, code, total)
	}
}

func assertSoldOut(t *testing.T, g *Gate, rdb *redis.Client, code string, total int) {
	t.Helper()
	ctx := context.Background()
	_, remaining, ok, err := g.Meta(ctx, code)
	require.NoError(t, err)
	require.True(t, ok)
	assert.EqualValues(t, 0, remaining)
	hlen, err := rdb.HLen(ctx, Keys(code)[2]).Result()
	require.NoError(t, err)
	assert.EqualValues(t, total, hlen)
	hlen, err = rdb.HLen(ctx, Keys(code)[1]).Result()
	require.NoError(t, err)
	assert.EqualValues(t, total, hlen, "one user entry per distinct customer")
}

// model is the reserve/release semantics written plainly in Go.
type model struct {
	remaining int64
	perUser   int
	users     map[int64]int
	orders    map[string]int64
	done      map[string]bool
}

func (m *model) reserve(it Item) Result {
	if c, ok := m.orders[it.OrderID]; ok {
		if c == it.CustomerID {
			return Duplicate
		}
		return OrderConflict
	}
	if m.done[it.OrderID] {
		return Finished
	}
	if m.users[it.CustomerID] >= m.perUser {
		return AlreadyUsed
	}
	if m.remaining <= 0 {
		return OutOfStock
	}
	m.remaining--
	m.users[it.CustomerID]++
	m.orders[it.OrderID] = it.CustomerID
	return Reserved
}

func (m *model) release(id string) int {
	c, ok := m.orders[id]
	if !ok {
		return 0
	}
	delete(m.orders, id)
	m.done[id] = true
	if m.users[c]--; m.users[c] == 0 {
		delete(m.users, c)
	}
	m.remaining++
	return 1
}

// TestReserveBatchMatchesSingle checks that a batch behaves exactly like its items
// sent one by one (and like the Go model), with duplicates, repeat customers,
// order conflicts, sell-outs and releases mixed in.
func TestReserveBatchMatchesSingle(t *testing.T) {
	t.Parallel()
	const seed, rounds, steps = 20240611, 300, 8
	g, rdb := newGate(t)
	ctx := context.Background()
	batchCode, singleCode := testCode(t, g, "batch"), testCode(t, g, "single")
	rng := rand.New(rand.NewPCG(seed, seed))
	seen := map[Result]int{}

	for round := range rounds {
		customers := 1 + rng.IntN(8)
		orderIDs := 1 + rng.IntN(30)
		total := rng.IntN(25)
		m := &model{perUser: 2, users: map[int64]int{}, orders: map[string]int64{}, done: map[string]bool{}}
		// Some reservations already exist when the voucher is loaded.
		var initial []Order
		for i := range rng.IntN(min(total, 4) + 1) {
			c := int64(1 + rng.IntN(customers))
			if m.users[c] >= m.perUser {
				continue
			}
			id := fmt.Sprintf("pre%d", i)
			initial = append(initial, Order{OrderID: id, CustomerID: c})
			m.users[c]++
			m.orders[id] = c
		}
		m.remaining = int64(total - len(initial))
		for _, code := range []string{batchCode, singleCode} {
			require.NoError(t, g.Unload(ctx, code))
			load(t, g, code, total, m.perUser, initial...)
		}

		for step := range steps {
			where := fmt.Sprintf("seed %d round %d step %d", seed, round, step)
			if rng.IntN(6) == 0 {
				ids := make([]string, 1+rng.IntN(4))
				for i := range ids {
					ids[i] = "o" + strconv.Itoa(rng.IntN(orderIDs))
				}
				want := 0
				for _, id := range ids {
					want += m.release(id)
				}
				for _, code := range []string{batchCode, singleCode} {
					got, err := g.Release(ctx, code, ids...)
					require.NoError(t, err)
					require.Equal(t, want, got, "%s: Release(%v)", where, ids)
				}
				continue
			}

			items := make([]Item, 1+rng.IntN(20))
			for i := range items {
				items[i] = Item{CustomerID: int64(1 + rng.IntN(customers)), OrderID: "o" + strconv.Itoa(rng.IntN(orderIDs)), OrderAmount: testAmount}
			}
			want := make([]Result, len(items))
			for i, it := range items {
				want[i] = m.reserve(it)
				seen[want[i]]++
			}
			got, remaining, err := g.Reserve(ctx, batchCode, items)
			require.NoError(t, err)
			require.Equal(t, want, got, "%s: Reserve(%v) as a batch", where, items)
			require.Equal(t, m.remaining, remaining, "%s: remaining after batch", where)
			for i, it := range items {
				got, remaining, err := g.Reserve(ctx, singleCode, []Item{it})
				require.NoError(t, err)
				require.Equal(t, want[i], got[0], "%s: Reserve(%v) alone", where, it)
				require.GreaterOrEqual(t, remaining, int64(0), "%s: remaining after Reserve(%v)", where, it)
			}
		}

		for _, code := range []string{batchCode, singleCode} {
			owners, remaining := orderOwners(t, g, code)
			require.Equal(t, m.remaining, remaining, "seed %d round %d: remaining of %s", seed, round, code)
			require.Equal(t, m.orders, owners, "seed %d round %d: orders of %s", seed, round, code)
			require.Equal(t, m.users, users(t, rdb, code), "seed %d round %d: users of %s", seed, round, code)
			require.EqualValues(t, total, remaining+int64(len(owners)), "remaining + orders = total limit")
			st, _, err := g.State(ctx, code)
			require.NoError(t, err)
			require.ElementsMatch(t, slices.Collect(maps.Keys(m.done)), st.Finished, "seed %d round %d: finished of %s", seed, round, code)
		}
	}
	// The generator must keep producing every outcome, or the comparison is weak.
	t.Logf("outcomes: %v", seen)
	for _, r := range []Result{Reserved, Duplicate, OutOfStock, AlreadyUsed, OrderConflict, Finished} {
		assert.Greater(t, seen[r], 100, "too few %v", r)
	}
}

func TestReserveOutcomes(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	load(t, g, code, 3, 1)

	got, remaining, err := g.Reserve(ctx, code, []Item{
		{1, "a", testAmount}, // reserved
		{1, "a", testAmount}, // retry of the same order in the same batch
		{2, "a", testAmount}, // someone else's order id
		{1, "b", testAmount}, // customer 1 already holds a use
		{2, "b", testAmount}, // reserved
		{3, "c", testAmount}, // reserved: the last use
		{4, "d", testAmount}, // sold out
	})
	require.NoError(t, err)
	assert.Equal(t, []Result{Reserved, Duplicate, OrderConflict, AlreadyUsed, Reserved, Reserved, OutOfStock}, got)
	assert.EqualValues(t, 0, remaining)

	// A retry long after still answers DUPLICATE, also when sold out.
	got, _, err = g.Reserve(ctx, code, []Item{{2, "b", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Duplicate}, got)

	st, loaded, err := g.State(ctx, code)
	require.NoError(t, err)
	require.True(t, loaded)
	require.Len(t, st.Orders, 3)
	for _, o := range st.Orders {
		assert.WithinDuration(t, st.Now, o.AdmittedAt, time.Minute, "admission time comes from Redis TIME")
	}

	// users and orders were created by the script; they expire with the counter.
	at, err := rdb.PExpireTime(ctx, Keys(code)[0]).Result()
	require.NoError(t, err)
	require.Positive(t, at)
	for _, k := range Keys(code)[:4] { // done is empty: not created
		kat, err := rdb.PExpireTime(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, at, kat, "PEXPIRETIME %s", k)
	}
}

func TestReserveEmptyBatchMakesNoCall(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	res, remaining, err := g.Reserve(context.Background(), "anything", nil)
	assert.NoError(t, err)
	assert.Nil(t, res)
	assert.Zero(t, remaining)
	n, err := g.Release(context.Background(), "anything")
	assert.NoError(t, err)
	assert.Zero(t, n)
	assert.Zero(t, g.Calls())
}

func TestReserveNotLoaded(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")

	got, remaining, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}, {2, "b", testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{NotLoaded, NotLoaded}, got)
	assert.Zero(t, remaining)
	n, err := rdb.Exists(ctx, Keys(code)...).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "reserve on an unloaded voucher must create nothing")

	_, _, ok, err := g.Meta(ctx, code)
	require.NoError(t, err)
	assert.False(t, ok)
	_, loaded, err := g.State(ctx, code)
	require.NoError(t, err)
	assert.False(t, loaded)
}

func TestReserveMissingMetaIsAnError(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	// A counter set by hand (the article's warmup) has no perUserLimit to enforce.
	require.NoError(t, rdb.Set(ctx, Keys(code)[0], 10, time.Minute).Err())

	_, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}})
	require.Error(t, err)
	got, err := rdb.Get(ctx, Keys(code)[0]).Result()
	require.NoError(t, err)
	assert.Equal(t, "10", got, "a failed reserve changes nothing")
}

func BenchmarkReserveSingle(b *testing.B) { benchmarkReserve(b, 1) }

func BenchmarkReserveBatch(b *testing.B) { benchmarkReserve(b, 64) }

// benchmarkReserve measures successful reservations (the script's longest path)
// of distinct customers, size items per call, from one goroutine: per call this
// is one round trip, so ns/item shows what batching buys.
func benchmarkReserve(b *testing.B, size int) {
	g, _ := newGate(b)
	ctx := context.Background()
	code := testCode(b, g, "v")
	const total = 100_000
	remaining := int64(0)
	items := make([]Item, size)
	next := 0
	for b.Loop() {
		if remaining < int64(size) {
			b.StopTimer()
			require.NoError(b, g.Unload(ctx, code))
			load(b, g, code, total, 1)
			remaining = total
			b.StartTimer()
		}
		for j := range items {
			next++
			items[j] = Item{CustomerID: int64(next), OrderID: "o" + strconv.Itoa(next), OrderAmount: testAmount}
		}
		res, rem, err := g.Reserve(ctx, code, items)
		if err != nil || res[0] != Reserved {
			b.Fatalf("Reserve = %v, %v", res, err)
		}
		remaining = rem
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/item")
}
