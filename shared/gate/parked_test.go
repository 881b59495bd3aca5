package gate

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReconcileLeavesParkedOrders: a hanging admission a settler parked is
// not freed by a reconcile while it is parked (ParkedGiveUp past its
// notBefore); unparked, or parked longer ago than that, it is; Parked lists
// what Park recorded, and the hash takes the voucher's expiry.
func TestReconcileLeavesParkedOrders(t *testing.T) {
	t.Parallel()
	g, rdb := newGate(t)
	ctx := context.Background()
	code := testCode(t, g, "parked")
	old := time.UnixMilli(time.Now().Add(-time.Hour).UnixMilli()).UTC()
	v := testMeta(10, 3)
	loadVoucher(t, g, code, v,
		Order{OrderID: "parked", CustomerID: 1, AdmittedAt: old},
		Order{OrderID: "forgotten", CustomerID: 2, AdmittedAt: old},
		Order{OrderID: "hanging", CustomerID: 3, AdmittedAt: old},
	)
	t.Cleanup(func() { rdb.Del(context.Background(), ParkedKey(code)) })
	soon := time.UnixMilli(time.Now().Add(time.Second).UnixMilli()).UTC()
	require.NoError(t, g.Park(ctx, code, []string{"parked"}, soon))
	require.NoError(t, g.Park(ctx, code, []string{"forgotten"}, old.Add(-ParkedGiveUp)))
	got, err := g.Parked(ctx, code)
	require.NoError(t, err)
	assert.Equal(t, map[string]time.Time{"parked": soon, "forgotten": old.Add(-ParkedGiveUp)}, got)
	at, err := rdb.PExpireTime(ctx, ParkedKey(code)).Result()
	require.NoError(t, err)
	assert.Positive(t, at, "the parked hash keeps the voucher's TTL")

	res, err := g.Reconcile(ctx, code, v, nil, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"forgotten", "hanging"}, res.Released, "a parked order is left to its settler")

	require.NoError(t, g.Unpark(ctx, code, "parked"))
	res, err = g.Reconcile(ctx, code, v, nil, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, []string{"parked"}, res.Released, "unparked, it is a hanging admission")
}
