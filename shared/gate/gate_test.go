package gate

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
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
		if r < 128 && voucher.ValidCode(string(r)) {
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
	require.True(tb, voucher.ValidCode(code), "testCode made invalid code %q", code)
	require.NoError(tb, g.Unload(context.Background(), code))
	tb.Cleanup(func() { _ = g.Unload(context.Background(), code) })
	return code
}

func testMeta(total, perUser int) voucher.Voucher {
	return voucher.Voucher{
		Terms: voucher.Terms{
			DiscountAmount: 100_000,
			MinOrderAmount: 500_000,
			TotalLimit:     total,
			PerUserLimit:   perUser,
			StartsAt:       time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli()).UTC(),
			EndsAt:         time.UnixMilli(time.Now().Add(time.Hour).UnixMilli()).UTC(),
			FlashSale:      true,
		},
	}
}

// testAmount is an order amount above testMeta's minimum.
const testAmount = 1_000_000

// load loads a fresh voucher whose remaining is total minus the given orders.
func load(tb testing.TB, g *Gate, code string, total, perUser int, orders ...Order) {
	tb.Helper()
	loadVoucher(tb, g, code, testMeta(total, perUser), orders...)
}

// loadVoucher loads v, its remaining TotalLimit minus the given orders.
func loadVoucher(tb testing.TB, g *Gate, code string, v voucher.Voucher, orders ...Order) {
	tb.Helper()
	ok, err := g.Load(context.Background(), code, Snapshot{
		Voucher:   v,
		Remaining: int64(v.TotalLimit - len(orders)),
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
		"voucher:{FLASH-100_a}:done",
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
		if got := voucher.ValidCode(tt.code); got != tt.want {
			t.Errorf("ValidCode(%q) = %v, want %v", tt.code, got, tt.want)
		}
	}
}

func TestInvalidCodeMakesNoCall(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	bad := "X}:remaining"
	_, _, err := g.Reserve(ctx, bad, []Item{{1, "o", testAmount}})
	assert.Error(t, err)
	_, err = g.Release(ctx, bad, "o")
	assert.Error(t, err)
	_, err = g.Load(ctx, bad, Snapshot{Voucher: testMeta(1, 1), Remaining: 1})
	assert.Error(t, err)
	_, _, _, err = g.Meta(ctx, bad)
	assert.Error(t, err)
	_, _, err = g.State(ctx, bad)
	assert.Error(t, err)
	_, err = g.Reconcile(ctx, bad, testMeta(3, 1), nil, time.Minute)
	assert.Error(t, err)
	assert.Error(t, g.Unload(ctx, bad))
	assert.Zero(t, g.Calls())
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
	got, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}})
	require.NoError(t, err)
	require.Equal(t, []Result{Reserved}, got)

	flush()
	before := g.Calls()
	got, remaining, err := g.Reserve(ctx, code, []Item{{2, "b", testAmount}, {3, "c", testAmount}})
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
	res, err := g.Reconcile(ctx, code, testMeta(3, 1), nil, time.Hour)
	require.NoError(t, err)
	assert.True(t, res.Loaded)
	flush()
	fp, err := g.Fingerprint(ctx, code)
	require.NoError(t, err)
	assert.True(t, fp.Loaded)
	flush()
	require.NoError(t, g.Unload(ctx, code))
}
