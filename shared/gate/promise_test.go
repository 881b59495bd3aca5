package gate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// promisedCode is testCode whose promises are deleted before and after.
func promisedCode(t *testing.T, g *Gate, rdb *redis.Client, suffix string) string {
	t.Helper()
	code := testCode(t, g, suffix)
	require.NoError(t, rdb.Del(context.Background(), LoggedKey(code)).Err())
	t.Cleanup(func() { rdb.Del(context.Background(), LoggedKey(code)) })
	return code
}

// TestPromise: a promise is recorded once (a second make answers the first),
// read back as recorded, marked logged, and forgotten; it takes the
// voucher's expiry.
func TestPromise(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := promisedCode(t, g, rdb, "v")
	load(t, g, code, 10, 2)
	at := time.UnixMilli(time.Now().UnixMilli()).UTC()
	p := Promise{OrderID: "o1", CustomerID: 7, OrderAmount: 5_000, DiscountAmount: 500, AdmittedAt: at, ExpiresAt: at.Add(time.Minute)}
	had, found, err := g.Promise(ctx, code, []Promise{p})
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, found)
	other := p
	other.OrderAmount = 10
	had, found, err = g.Promise(ctx, code, []Promise{other})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, found)
	assert.Equal(t, p, had[0], "the promise a second make finds")
	ttl, err := rdb.PExpireTime(ctx, LoggedKey(code)).Result()
	require.NoError(t, err)
	assert.Positive(t, ttl, "the promises take the voucher's expiry")

	require.NoError(t, g.MarkLogged(ctx, code, "o1"))
	got, found, err := g.Promises(ctx, code, "o1", "o2")
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false}, found)
	p.Logged = true
	assert.Equal(t, p, got[0])

	require.NoError(t, g.Forget(ctx, code, "o1"))
	_, found, err = g.Promises(ctx, code, "o1")
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, found)
}

// TestPromisedOrderIsNeverFreed: neither a give-back, a drop nor a reconcile
// frees a promised order, however old; once its promise is forgotten, a
// give-back does.
func TestPromisedOrderIsNeverFreed(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := promisedCode(t, g, rdb, "v")
	old := time.UnixMilli(time.Now().Add(-10 * time.Minute).UnixMilli()).UTC()
	v := testMeta(10, 2)
	loadVoucher(t, g, code, v, Order{OrderID: "promised", CustomerID: 1, AdmittedAt: old},
		Order{OrderID: "hanging", CustomerID: 2, AdmittedAt: old})
	_, _, err := g.Promise(ctx, code, []Promise{{OrderID: "promised", CustomerID: 1, OrderAmount: testAmount,
		DiscountAmount: 1, AdmittedAt: old, ExpiresAt: old.Add(time.Hour)}})
	require.NoError(t, err)

	for _, free := range []func(context.Context, string, ...string) (int, error){g.GiveBack, g.Drop} {
		n, err := free(ctx, code, "promised")
		require.NoError(t, err)
		assert.Zero(t, n, "a promised order given back or dropped")
	}
	res, err := g.Reconcile(ctx, code, v, nil, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"hanging"}, res.Released, "a reconcile with no row for either")
	owners, _ := orderOwners(t, g, code)
	assert.Equal(t, map[string]int64{"promised": 1}, owners)

	require.NoError(t, g.Forget(ctx, code, "promised"))
	n, err := g.GiveBack(ctx, code, "promised")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "given back once its promise is forgotten")
}

// TestClaimOrder: an orderId is claimed by one voucher at a time; another
// voucher's free leaves it.
func TestClaimOrder(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	order := "claim-" + testCode(t, g, "o")
	t.Cleanup(func() { rdb.Del(context.Background(), OrderKey(order)) })
	expires := time.Now().Add(time.Minute)
	claim := func(code string) string {
		t.Helper()
		owners, errs := g.ClaimOrders(ctx, code, []string{order}, expires)
		require.NoError(t, errs[0])
		return owners[0]
	}
	for _, step := range []struct{ code, want string }{{"A", "A"}, {"B", "A"}, {"A", "A"}} {
		assert.Equal(t, step.want, claim(step.code), "ClaimOrders(%s)", step.code)
	}
	require.NoError(t, g.FreeOrders(ctx, "B", order))
	assert.Equal(t, "A", claim("B"), "after another voucher's free")
	require.NoError(t, g.FreeOrders(ctx, "A", order))
	assert.Equal(t, "B", claim("B"), "after its own voucher's free")
	require.NoError(t, rdb.ScriptFlush(ctx).Err()) // the pipeline sends the script itself then
	assert.Equal(t, "B", claim("C"), "after SCRIPT FLUSH")
}

// TestLowerLimit: a lower totalLimit is refused below the uses held (held
// reported, nothing changed), taken at them (remaining 0, meta's totalLimit
// the new one), and undone by Update with the old terms.
func TestLowerLimit(t *testing.T) {
	t.Parallel()
	g, _ := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "v")
	v := testMeta(10, 3)
	loadVoucher(t, g, code, v)
	_, _, err := g.Reserve(ctx, code, []Item{{1, "a", testAmount}, {2, "b", testAmount}, {3, "c", testAmount}})
	require.NoError(t, err)

	loaded, refused, held, err := g.LowerLimit(ctx, code, 2)
	require.NoError(t, err)
	assert.Equal(t, []any{true, true, int64(3)}, []any{loaded, refused, held})
	_, remaining, _, err := g.Meta(ctx, code)
	require.NoError(t, err)
	assert.EqualValues(t, 7, remaining, "remaining after a refused lowering")

	loaded, refused, _, err = g.LowerLimit(ctx, code, 3)
	require.NoError(t, err)
	assert.True(t, loaded && !refused)
	meta, remaining, _, err := g.Meta(ctx, code)
	require.NoError(t, err)
	assert.EqualValues(t, 0, remaining)
	assert.Equal(t, 3, meta.TotalLimit)

	_, err = g.Update(ctx, code, v)
	require.NoError(t, err)
	_, remaining, _, err = g.Meta(ctx, code)
	require.NoError(t, err)
	assert.EqualValues(t, 7, remaining, "remaining after the undo")
}

// TestLoadHoldsPromised: a voucher loaded again while a promise survives
// (its record still in the admissions log, no row yet) holds the promised
// order and counts its use, so that it is not sold a second time.
func TestLoadHoldsPromised(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := promisedCode(t, g, rdb, "v")
	v := testMeta(5, 2)
	loadVoucher(t, g, code, v, Order{OrderID: "row", CustomerID: 1})
	at := time.UnixMilli(time.Now().UnixMilli()).UTC()
	_, _, err := g.Promise(ctx, code, []Promise{{OrderID: "logged", CustomerID: 2, OrderAmount: testAmount,
		DiscountAmount: 1, AdmittedAt: at, ExpiresAt: at.Add(time.Hour)}})
	require.NoError(t, err)
	require.NoError(t, g.Unload(ctx, code))

	loadVoucher(t, g, code, v, Order{OrderID: "row", CustomerID: 1})
	owners, remaining := orderOwners(t, g, code)
	assert.Equal(t, map[string]int64{"row": 1, "logged": 2}, owners)
	assert.EqualValues(t, 3, remaining)
	assert.Equal(t, map[int64]int{1: 1, 2: 1}, users(t, rdb, code))
}

// TestTakeOverStale: of many promises, TakeOverStale takes over exactly the
// pending and taken-over ones admitted before the cutoff (over several HSCAN
// steps), never a logged one nor a younger one; an Abandon after it removes
// none of them (their records are being produced again).
func TestTakeOverStale(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := promisedCode(t, g, rdb, "stale")
	load(t, g, code, 10_000, 2)
	now := time.UnixMilli(time.Now().UnixMilli()).UTC()
	old, young := now.Add(-time.Minute), now
	var ps []Promise
	want := map[string]bool{}
	for i := range 3 * staleScanCount {
		at := young
		if i%2 == 0 {
			at = old
		}
		id := fmt.Sprintf("o%d", i)
		ps = append(ps, Promise{OrderID: id, CustomerID: int64(i), OrderAmount: 5_000, DiscountAmount: 500, AdmittedAt: at, ExpiresAt: at.Add(time.Minute)})
		if at == old && i%3 != 0 {
			want[id] = true
		}
	}
	_, _, err := g.Promise(ctx, code, ps)
	require.NoError(t, err)
	var logged []string
	for i := 0; i < len(ps); i += 3 {
		logged = append(logged, ps[i].OrderID)
	}
	require.NoError(t, g.MarkLogged(ctx, code, logged...))

	got, err := g.TakeOverStale(ctx, code, now.Add(-time.Second))
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, p := range got {
		ids[p.OrderID] = true
		assert.Equal(t, old, p.AdmittedAt, p.OrderID)
		assert.False(t, p.Logged, p.OrderID)
	}
	assert.Equal(t, want, ids)

	again, err := g.TakeOverStale(ctx, code, now.Add(-time.Second))
	require.NoError(t, err)
	assert.Len(t, again, len(want), "taken-over promises are taken over again (their produce may have failed)")
	var all []string
	for id := range want {
		all = append(all, id)
	}
	removed, err := g.Abandon(ctx, code, all...)
	require.NoError(t, err)
	assert.Empty(t, removed, "a taken-over promise is not abandoned by the ledger whose produce failed")
}

// TestAbandonLeavesTombstone: an abandoned promise leaves a tombstone that
// names its admission (Abandoned finds that record, not another of the same
// order); a later promise of the order is not settled by the old record, only
// by its own, and settling the old record clears the tombstone.
func TestAbandonLeavesTombstone(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := promisedCode(t, g, rdb, "tomb")
	load(t, g, code, 10, 2)
	first := time.UnixMilli(time.Now().Add(-time.Minute).UnixMilli()).UTC()
	later := first.Add(30 * time.Second)
	p := Promise{OrderID: "o1", CustomerID: 7, OrderAmount: 5_000, DiscountAmount: 500, AdmittedAt: first, ExpiresAt: first.Add(time.Minute)}
	_, _, err := g.Promise(ctx, code, []Promise{p})
	require.NoError(t, err)
	removed, err := g.Abandon(ctx, code, "o1")
	require.NoError(t, err)
	require.Equal(t, []string{"o1"}, removed)

	p2 := p
	p2.AdmittedAt, p2.OrderAmount = later, 7_000
	_, found, err := g.Promise(ctx, code, []Promise{p2})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, found, "a tombstone is no promise")

	old, now := Record{OrderID: "o1", AdmittedAt: first}, Record{OrderID: "o1", AdmittedAt: later}
	ab, err := g.Abandoned(ctx, code, []Record{old, now, {OrderID: "o2", AdmittedAt: first}})
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false, false}, ab)

	require.NoError(t, g.Settle(ctx, code, []Record{old}))
	got, found, err := g.Promises(ctx, code, "o1")
	require.NoError(t, err)
	require.Equal(t, []bool{true}, found, "the old record does not settle the later promise")
	assert.Equal(t, later, got[0].AdmittedAt)
	ab, err = g.Abandoned(ctx, code, []Record{old})
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, ab, "settled: the tombstone is gone")

	require.NoError(t, g.Settle(ctx, code, []Record{now}))
	_, found, err = g.Promises(ctx, code, "o1")
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, found)
	n, err := rdb.HLen(ctx, LoggedKey(code)).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing left in the hash")
}

// TestAbandonAfterTheConsumerSawTheRecord: once the consumer has checked a
// record (Abandoned said no), its pending promise is logged, so an Abandon
// from a produce that reported a failure all the same removes nothing and
// gives no use back while the row is being written; a record checked after
// the abandon is skipped. Without it, the late abandon gave the use back,
// the consumer wrote the row, and Redis admitted one order too many.
func TestAbandonAfterTheConsumerSawTheRecord(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := promisedCode(t, g, rdb, "late")
	load(t, g, code, 10, 2)
	at := time.UnixMilli(time.Now().Add(-time.Second).UnixMilli()).UTC()
	var ps []Promise
	for _, id := range []string{"o1", "o2"} {
		ps = append(ps, Promise{OrderID: id, CustomerID: 7, OrderAmount: 5_000, DiscountAmount: 500, AdmittedAt: at, ExpiresAt: at.Add(time.Minute)})
	}
	_, _, err := g.Promise(ctx, code, ps)
	require.NoError(t, err)

	ab, err := g.Abandoned(ctx, code, []Record{{OrderID: "o1", AdmittedAt: at}, {OrderID: "o2", AdmittedAt: at.Add(time.Second)}})
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, ab)
	got, _, err := g.Promises(ctx, code, "o1", "o2")
	require.NoError(t, err)
	assert.True(t, got[0].Logged, "the record the consumer holds: its promise is logged")
	assert.False(t, got[1].Logged, "another admission's record does not log this promise")

	removed, err := g.Abandon(ctx, code, "o1", "o2")
	require.NoError(t, err)
	assert.Equal(t, []string{"o2"}, removed, "the late abandon leaves the record being written")
	ab, err = g.Abandoned(ctx, code, []Record{{OrderID: "o1", AdmittedAt: at}, {OrderID: "o2", AdmittedAt: at}})
	require.NoError(t, err)
	assert.Equal(t, []bool{false, true}, ab)
}
