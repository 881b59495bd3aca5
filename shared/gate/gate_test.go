package gate

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/devstack/devstacktest"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// newClient connects to the test Redis and closes the client at cleanup.
func newClient(tb testing.TB) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(devstacktest.RedisURL(tb))
	require.NoError(tb, err)
	rdb := redis.NewClient(opt)
	tb.Cleanup(func() { _ = rdb.Close() })
	require.NoError(tb, rdb.Ping(context.Background()).Err())
	return rdb
}

// newGate returns a Gate and the raw client behind it (for inspecting keys).
func newGate(tb testing.TB) (*Gate, *redis.Client) {
	tb.Helper()
	rdb := newClient(tb)
	return New(rdb), rdb
}

// testCode returns a valid voucher code unique to the test and suffix, removes
// leftovers of an earlier run, and unloads it at cleanup.
func testCode(tb testing.TB, g *Gate, suffix string) string {
	tb.Helper()
	h := fnv.New32a()
	h.Write([]byte(tb.Name() + "/" + suffix))
	name := strings.Map(func(r rune) rune {
		if r < 128 && validCode(string(r)) {
			return r
		}
		return '_'
	}, strings.TrimPrefix(tb.Name(), "Test"))
	if len(name) > 14 {
		name = name[:14]
	}
	if len(suffix) > 8 {
		suffix = suffix[:8]
	}
	code := fmt.Sprintf("%s-%08x-%s", name, h.Sum32(), suffix)
	require.True(tb, validCode(code), "testCode made invalid code %q", code)
	require.NoError(tb, g.Unload(context.Background(), code))
	tb.Cleanup(func() { _ = g.Unload(context.Background(), code) })
	return code
}

func testMeta(total, perUser int) Meta {
	return Meta{
		DiscountAmount: 100_000,
		MinOrderAmount: 500_000,
		TotalLimit:     total,
		PerUserLimit:   perUser,
		StartsAt:       time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli()).UTC(),
		EndsAt:         time.UnixMilli(time.Now().Add(time.Hour).UnixMilli()).UTC(),
		FlashSale:      true,
	}
}

// load loads a fresh voucher whose remaining is total minus the given orders.
func load(tb testing.TB, g *Gate, code string, total, perUser int, orders ...Order) {
	tb.Helper()
	ok, err := g.Load(context.Background(), code, Snapshot{
		Meta:      testMeta(total, perUser),
		Remaining: int64(total - len(orders)),
		Orders:    orders,
	})
	require.NoError(tb, err)
	require.True(tb, ok, "Load(%s) = false, want true", code)
}

// users reads the users hash as customer -> count.
func users(tb testing.TB, rdb *redis.Client, code string) map[int64]int {
	tb.Helper()
	raw, err := rdb.HGetAll(context.Background(), Keys(code)[1]).Result()
	require.NoError(tb, err)
	out := make(map[int64]int, len(raw))
	for k, v := range raw {
		c, err := strconv.ParseInt(k, 10, 64)
		require.NoError(tb, err)
		n, err := strconv.Atoi(v)
		require.NoError(tb, err)
		out[c] = n
	}
	return out
}

// orderOwners reads State's orders as orderId -> customer (timestamps dropped).
func orderOwners(tb testing.TB, g *Gate, code string) (map[string]int64, int64) {
	tb.Helper()
	st, loaded, err := g.State(context.Background(), code)
	require.NoError(tb, err)
	require.True(tb, loaded)
	out := make(map[string]int64, len(st.Orders))
	for _, o := range st.Orders {
		out[o.OrderID] = o.CustomerID
	}
	return out, st.Remaining
}

func TestKeys(t *testing.T) {
	got := Keys("FLASH-100_a")
	want := []string{
		"voucher:{FLASH-100_a}:remaining",
		"voucher:{FLASH-100_a}:users",
		"voucher:{FLASH-100_a}:orders",
		"voucher:{FLASH-100_a}:meta",
	}
	assert.Equal(t, want, got)
}

func TestValidCode(t *testing.T) {
	tests := []struct {
		code string
		want bool
	}{
		{"FLASH100", true},
		{"a", true},
		{"A-b_9", true},
		{strings.Repeat("x", 32), true},
		{"", false},
		{strings.Repeat("x", 33), false},
		{"A}B", false},
		{"{A}", false},
		{"A:remaining", false},
		{"A B", false},
		{"Ä", false},
		{"A\x00", false},
	}
	for _, tt := range tests {
		if got := validCode(tt.code); got != tt.want {
			t.Errorf("validCode(%q) = %v, want %v", tt.code, got, tt.want)
		}
	}
}

func TestInvalidCodeMakesNoCall(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	bad := "X}:remaining"
	_, _, err := g.Reserve(ctx, bad, []Item{{1, "o"}})
	assert.Error(t, err)
	_, err = g.Release(ctx, bad, "o")
	assert.Error(t, err)
	_, err = g.Load(ctx, bad, Snapshot{Meta: testMeta(1, 1), Remaining: 1})
	assert.Error(t, err)
	_, _, _, err = g.Meta(ctx, bad)
	assert.Error(t, err)
	_, _, err = g.State(ctx, bad)
	assert.Error(t, err)
	_, err = g.Reconcile(ctx, bad, nil, time.Minute)
	assert.Error(t, err)
	assert.Error(t, g.Unload(ctx, bad))
	assert.Zero(t, g.Calls())
}

func TestResultString(t *testing.T) {
	tests := []struct {
		r        Result
		want     string
		admitted bool
	}{
		{Reserved, "RESERVED", true},
		{Duplicate, "DUPLICATE", true},
		{OutOfStock, "OUT_OF_STOCK", false},
		{AlreadyUsed, "ALREADY_USED", false},
		{NotLoaded, "NOT_LOADED", false},
		{OrderConflict, "ORDER_CONFLICT", false},
		{0, "Result(0)", false},
		{7, "Result(7)", false},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("Result(%d).String() = %q, want %q", int(tt.r), got, tt.want)
		}
		if got := tt.r.Admitted(); got != tt.admitted {
			t.Errorf("%v.Admitted() = %v, want %v", tt.r, got, tt.admitted)
		}
	}
}

func TestDecodeReserve(t *testing.T) {
	tests := []struct {
		name      string
		v         any
		n         int
		want      []Result
		remaining int64
		wantErr   bool
	}{
		{"one reserved", []any{int64(9), int64(1)}, 1, []Result{Reserved}, 9, false},
		{"mixed", []any{int64(0), int64(1), int64(2), int64(3), int64(4), int64(6)}, 5,
			[]Result{Reserved, Duplicate, OutOfStock, AlreadyUsed, OrderConflict}, 0, false},
		{"all not loaded", []any{int64(0), int64(5), int64(5)}, 2, []Result{NotLoaded, NotLoaded}, 0, false},
		{"out of stock on negative counter", []any{int64(-3), int64(3)}, 1, []Result{OutOfStock}, -3, false},
		{"nil", nil, 1, nil, 0, true},
		{"not an array", int64(1), 1, nil, 0, true},
		{"string reply", "OK", 1, nil, 0, true},
		{"empty array", []any{}, 1, nil, 0, true},
		{"too short", []any{int64(1)}, 1, nil, 0, true},
		{"too long", []any{int64(1), int64(1), int64(1)}, 1, nil, 0, true},
		{"remaining as string", []any{"9", int64(1)}, 1, nil, 0, true},
		{"code as string", []any{int64(9), "1"}, 1, nil, 0, true},
		{"code nil", []any{int64(9), nil}, 1, nil, 0, true},
		{"code zero", []any{int64(9), int64(0)}, 1, nil, 0, true},
		{"code seven", []any{int64(9), int64(7)}, 1, nil, 0, true},
		{"code negative", []any{int64(9), int64(-1)}, 1, nil, 0, true},
		{"code overflowing int", []any{int64(9), int64(1 << 40)}, 1, nil, 0, true},
		{"code as float", []any{int64(9), 1.0}, 1, nil, 0, true},
		{"partly not loaded", []any{int64(0), int64(5), int64(1)}, 2, nil, 0, true},
		{"not loaded with stock", []any{int64(4), int64(5)}, 1, nil, 0, true},
		{"reserved below zero", []any{int64(-1), int64(1)}, 1, nil, 0, true},
		{"zero items", []any{int64(0)}, 0, nil, 0, true},
		{"negative items", []any{int64(0)}, -1, nil, 0, true},
		{"nested array", []any{int64(0), []any{int64(1)}}, 1, nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, remaining, err := decodeReserve(tt.v, tt.n)
			if tt.wantErr {
				if err == nil {
					t.Errorf("decodeReserve(%#v, %d) = %v, %d, want error", tt.v, tt.n, got, remaining)
				}
				return
			}
			if err != nil || remaining != tt.remaining || !assert.ObjectsAreEqual(tt.want, got) {
				t.Errorf("decodeReserve(%#v, %d) = %v, %d, %v, want %v, %d", tt.v, tt.n, got, remaining, err, tt.want, tt.remaining)
			}
		})
	}
}

func TestDecodeReplies(t *testing.T) {
	meta := []any{int64(7), "100", "5", "10", "2", "1700000000000", "1700003600000", "1"}
	m, remaining, ok, err := decodeMeta(meta)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.EqualValues(t, 7, remaining)
	assert.Equal(t, Meta{100, 5, 10, 2, time.UnixMilli(1700000000000).UTC(), time.UnixMilli(1700003600000).UTC(), true}, m)

	_, _, ok, err = decodeMeta([]any{})
	assert.NoError(t, err)
	assert.False(t, ok)
	for _, bad := range []any{nil, "x", meta[:7], []any{int64(7), "100", "5", "10", "2", "1", "2", nil},
		[]any{int64(7), "100", "5", "10", "0", "1", "2", "1"}, []any{int64(7), "100", "5", "10", "1", "1", "2", "2"},
		[]any{"7", "100", "5", "10", "1", "1", "2", "1"}, []any{int64(7), "1.5", "5", "10", "1", "1", "2", "1"}} {
		if _, _, _, err := decodeMeta(bad); err == nil {
			t.Errorf("decodeMeta(%#v) succeeded, want error", bad)
		}
	}

	st, loaded, err := decodeState([]any{int64(3), int64(1700000000123), "b", "7:1700000000000", "a", "-2:0"})
	require.NoError(t, err)
	assert.True(t, loaded)
	assert.Equal(t, State{Remaining: 3, Now: time.UnixMilli(1700000000123).UTC(), Orders: []Order{
		{OrderID: "a", CustomerID: -2},
		{OrderID: "b", CustomerID: 7, AdmittedAt: time.UnixMilli(1700000000000).UTC()},
	}}, st)
	for _, bad := range []any{nil, []any{int64(3)}, []any{int64(3), int64(1), "a"}, []any{int64(3), int64(1), "a", "7"},
		[]any{int64(3), int64(1), "a", "x:1"}, []any{int64(3), int64(1), "a", "7:x"}, []any{int64(3), int64(1), "a", int64(7)}} {
		if _, _, err := decodeState(bad); err == nil {
			t.Errorf("decodeState(%#v) succeeded, want error", bad)
		}
	}

	rr, err := decodeReconcile([]any{int64(1), int64(5), int64(3), int64(1), "z", "y"})
	require.NoError(t, err)
	assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 5, RemainingAfter: 3, Restored: 1, Released: []string{"y", "z"}}, rr)
	rr, err = decodeReconcile([]any{int64(0)})
	require.NoError(t, err)
	assert.False(t, rr.Loaded)
	for _, bad := range []any{nil, []any{}, []any{int64(0), int64(1)}, []any{int64(2)}, []any{int64(1), int64(5), int64(3)},
		[]any{int64(1), int64(5), int64(-1), int64(0)}, []any{int64(1), int64(5), int64(3), int64(0), int64(9)}} {
		if _, err := decodeReconcile(bad); err == nil {
			t.Errorf("decodeReconcile(%#v) succeeded, want error", bad)
		}
	}
}

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
			res, _, err := g.Reserve(context.Background(), code, []Item{{CustomerID: int64(i + 1), OrderID: "o" + strconv.Itoa(i)}})
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
					items[j] = Item{CustomerID: int64(k + 1), OrderID: "o" + strconv.Itoa(k)}
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
}

func (m *model) reserve(it Item) Result {
	if c, ok := m.orders[it.OrderID]; ok {
		if c == it.CustomerID {
			return Duplicate
		}
		return OrderConflict
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
		m := &model{perUser: 2, users: map[int64]int{}, orders: map[string]int64{}}
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
				items[i] = Item{CustomerID: int64(1 + rng.IntN(customers)), OrderID: "o" + strconv.Itoa(rng.IntN(orderIDs))}
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
		}
	}
	// The generator must keep producing every outcome, or the comparison is weak.
	t.Logf("outcomes: %v", seen)
	for _, r := range []Result{Reserved, Duplicate, OutOfStock, AlreadyUsed, OrderConflict} {
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
		{1, "a"}, // reserved
		{1, "a"}, // retry of the same order in the same batch
		{2, "a"}, // someone else's order id
		{1, "b"}, // customer 1 already holds a use
		{2, "b"}, // reserved
		{3, "c"}, // reserved: the last use
		{4, "d"}, // sold out
	})
	require.NoError(t, err)
	assert.Equal(t, []Result{Reserved, Duplicate, OrderConflict, AlreadyUsed, Reserved, Reserved, OutOfStock}, got)
	assert.EqualValues(t, 0, remaining)

	// A retry long after still answers DUPLICATE, also when sold out.
	got, _, err = g.Reserve(ctx, code, []Item{{2, "b"}})
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
	for _, k := range Keys(code) {
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

	got, remaining, err := g.Reserve(ctx, code, []Item{{1, "a"}, {2, "b"}})
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

	_, _, err := g.Reserve(ctx, code, []Item{{1, "a"}})
	require.Error(t, err)
	got, err := rdb.Get(ctx, Keys(code)[0]).Result()
	require.NoError(t, err)
	assert.Equal(t, "10", got, "a failed reserve changes nothing")
}

func TestLoad(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()

	t.Run("twice keeps the live counter", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 100, 1)
		_, _, err := g.Reserve(ctx, code, []Item{{1, "a"}})
		require.NoError(t, err)

		ok, err := g.Load(ctx, code, Snapshot{Meta: testMeta(100, 1), Remaining: 100})
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

		got, _, err := g.Reserve(ctx, code, []Item{{1, "d"}, {2, "e"}, {2, "c"}})
		require.NoError(t, err)
		assert.Equal(t, []Result{AlreadyUsed, Reserved, Duplicate}, got)
	})

	t.Run("repeated order counts once", func(t *testing.T) {
		code := testCode(t, g, "v")
		ok, err := g.Load(ctx, code, Snapshot{Meta: testMeta(5, 2), Remaining: 4,
			Orders: []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "a", CustomerID: 1}}})
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, map[int64]int{1: 1}, users(t, rdb, code))
	})

	t.Run("meta round-trips", func(t *testing.T) {
		code := testCode(t, g, "v")
		want := testMeta(1000, 3)
		want.DiscountAmount, want.MinOrderAmount = 1<<40, 0
		ok, err := g.Load(ctx, code, Snapshot{Meta: want, Remaining: 998})
		require.NoError(t, err)
		require.True(t, ok)
		got, remaining, ok, err := g.Meta(ctx, code)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, want, got)
		assert.EqualValues(t, 998, remaining)

		want.FlashSale, want.StartsAt = false, time.Time{}
		code = testCode(t, g, "w")
		_, err = g.Load(ctx, code, Snapshot{Meta: want, Remaining: 1})
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
		for _, k := range Keys(code) {
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
			{Meta: noEnd, Remaining: 10},
			{Meta: noPerUser, Remaining: 10},
			{Meta: ok, Remaining: 11},
			{Meta: ok, Remaining: -1},
			{Meta: ok, Remaining: 10, Orders: []Order{{OrderID: "a", CustomerID: 1}}},
			{Meta: ok, Remaining: 8, Orders: []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "a", CustomerID: 2}}},
			{Meta: ok, Remaining: 8, Orders: []Order{{OrderID: "", CustomerID: 1}}},
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
		loaded, err := g.Load(ctx, code, Snapshot{Meta: m, Remaining: 10})
		assert.Error(t, err)
		assert.False(t, loaded)
		n, err := rdb.Exists(ctx, Keys(code)...).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

func TestRelease(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()

	t.Run("twice gives one use back", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 2, 2)
		got, _, err := g.Reserve(ctx, code, []Item{{1, "a"}, {1, "b"}})
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

		// The released order may reserve again.
		got, _, err = g.Reserve(ctx, code, []Item{{1, "a"}})
		require.NoError(t, err)
		assert.Equal(t, []Result{Reserved}, got)
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
	got, _, err := g.Reserve(ctx, code, []Item{{1, "a"}, {2, "b"}})
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

func TestReconcile(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	old := time.UnixMilli(time.Now().Add(-10 * time.Minute).UnixMilli()).UTC()

	t.Run("repairs both directions", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 10, 3,
			Order{OrderID: "hanging", CustomerID: 1, AdmittedAt: old}, // admitted, never written to the DB
			Order{OrderID: "written", CustomerID: 2, AdmittedAt: old}, // in the DB
		)
		got, _, err := g.Reserve(ctx, code, []Item{{3, "young"}}) // DB write may be in flight
		require.NoError(t, err)
		require.Equal(t, []Result{Reserved}, got)
		require.NoError(t, rdb.Set(ctx, Keys(code)[0], 42, redis.KeepTTL).Err()) // a drifted counter

		db := []Order{{OrderID: "written", CustomerID: 2}, {OrderID: "lost", CustomerID: 4}}
		res, err := g.Reconcile(ctx, code, db, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 42, RemainingAfter: 7, Released: []string{"hanging"}, Restored: 1}, res)

		owners, remaining := orderOwners(t, g, code)
		assert.Equal(t, map[string]int64{"written": 2, "young": 3, "lost": 4}, owners)
		assert.EqualValues(t, 7, remaining)
		assert.Equal(t, map[int64]int{2: 1, 3: 1, 4: 1}, users(t, rdb, code))
		for _, k := range Keys(code) {
			at, err := rdb.PExpireTime(ctx, k).Result()
			require.NoError(t, err)
			assert.Positive(t, at, "%s keeps a TTL", k)
		}

		// Nothing left to do the second time.
		res, err = g.Reconcile(ctx, code, db, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 7, RemainingAfter: 7, Released: []string{}}, res)

		// With no grace the young order is hanging too.
		res, err = g.Reconcile(ctx, code, db, 0)
		require.NoError(t, err)
		assert.Equal(t, []string{"young"}, res.Released)
		assert.EqualValues(t, 8, res.RemainingAfter)
	})

	t.Run("never below zero", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 2, 1, Order{OrderID: "a", CustomerID: 1}, Order{OrderID: "b", CustomerID: 2})
		db := []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "b", CustomerID: 2}, {OrderID: "c", CustomerID: 3}}
		res, err := g.Reconcile(ctx, code, db, time.Minute)
		require.NoError(t, err)
		assert.EqualValues(t, 0, res.RemainingAfter)
		assert.Equal(t, 1, res.Restored)
		got, _, err := g.Reserve(ctx, code, []Item{{9, "z"}})
		require.NoError(t, err)
		assert.Equal(t, []Result{OutOfStock}, got)
	})

	t.Run("database decides the customer", func(t *testing.T) {
		code := testCode(t, g, "v")
		load(t, g, code, 5, 1, Order{OrderID: "a", CustomerID: 1, AdmittedAt: old})
		res, err := g.Reconcile(ctx, code, []Order{{OrderID: "a", CustomerID: 2}}, time.Minute)
		require.NoError(t, err)
		assert.Empty(t, res.Released)
		st, _, err := g.State(ctx, code)
		require.NoError(t, err)
		assert.Equal(t, []Order{{OrderID: "a", CustomerID: 2, AdmittedAt: old}}, st.Orders)
		assert.Equal(t, map[int64]int{2: 1}, users(t, rdb, code))
	})

	t.Run("not loaded changes nothing", func(t *testing.T) {
		code := testCode(t, g, "v")
		res, err := g.Reconcile(ctx, code, []Order{{OrderID: "a", CustomerID: 1}}, time.Minute)
		require.NoError(t, err)
		assert.False(t, res.Loaded)
		n, err := rdb.Exists(ctx, Keys(code)...).Result()
		require.NoError(t, err)
		assert.Zero(t, n)
	})

	t.Run("refuses conflicting input", func(t *testing.T) {
		code := testCode(t, g, "v")
		_, err := g.Reconcile(ctx, code, nil, -time.Second)
		assert.Error(t, err)
		_, err = g.Reconcile(ctx, code, []Order{{OrderID: "a", CustomerID: 1}, {OrderID: "a", CustomerID: 2}}, time.Minute)
		assert.Error(t, err)
	})
}

// TestScriptFlush runs every script after Redis forgot them (a restart, SCRIPT
// FLUSH): EVALSHA fails with NOSCRIPT and go-redis falls back to EVAL. It is not
// parallel, so no other test reloads the scripts in between.
func TestScriptFlush(t *testing.T) {
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")

	flush := func() {
		t.Helper()
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
	}
	flush()
	load(t, g, code, 2, 1)
	got, _, err := g.Reserve(ctx, code, []Item{{1, "a"}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved}, got)

	flush()
	before := g.Calls()
	got, remaining, err := g.Reserve(ctx, code, []Item{{2, "b"}, {3, "c"}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Reserved, OutOfStock}, got)
	assert.EqualValues(t, 0, remaining)
	assert.Equal(t, before+1, g.Calls(), "the EVAL fallback is the same call")
	cached, err := rdb.ScriptExists(ctx, reserveScript.Hash()).Result()
	require.NoError(t, err)
	assert.Equal(t, []bool{true}, cached, "EVAL caches the script again")

	flush()
	_, _, ok, err := g.Meta(ctx, code)
	require.NoError(t, err)
	assert.True(t, ok)
	flush()
	_, loaded, err := g.State(ctx, code)
	require.NoError(t, err)
	assert.True(t, loaded)
	flush()
	n, err := g.Release(ctx, code, "a")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	flush()
	res, err := g.Reconcile(ctx, code, nil, time.Hour)
	require.NoError(t, err)
	assert.True(t, res.Loaded)
	flush()
	require.NoError(t, g.Unload(ctx, code))
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
			items[j] = Item{CustomerID: int64(next), OrderID: "o" + strconv.Itoa(next)}
		}
		res, rem, err := g.Reserve(ctx, code, items)
		if err != nil || res[0] != Reserved {
			b.Fatalf("Reserve = %v, %v", res, err)
		}
		remaining = rem
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/item")
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
