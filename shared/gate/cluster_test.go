package gate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The scripts run on a Redis Cluster: every voucher's keys share one slot, and
// vouchers spread over the masters. Exact under concurrency.
func TestOnRedisCluster(t *testing.T) {
	cl := devstacktest.NewRedisCluster(t, devstack.ClusterOptions{Masters: 3})
	rdb, err := NewClient(cl.URL(), ClientOptions{Timeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { rdb.Close() })
	g := New(rdb)
	ctx := context.Background()

	masters := map[string]bool{}
	codes := make([]string, 12)
	for i := range codes {
		codes[i] = fmt.Sprintf("CL%d-%d", i, time.Now().UnixNano()%100000)
		loaded, err := g.Load(ctx, codes[i], Snapshot{Voucher: voucher.Voucher{
			Terms: voucher.Terms{
				DiscountAmount: 1,
				TotalLimit:     40,
				PerUserLimit:   1,
				StartsAt:       time.Now().Add(-time.Hour),
				EndsAt:         time.Now().Add(time.Hour),
				FlashSale:      true,
			},
		}, Remaining: 40})
		require.NoError(t, err)
		require.True(t, loaded)
		m, err := cl.MasterOf(Keys(codes[i])[0])
		require.NoError(t, err)
		masters[m.Addr] = true
	}
	assert.Greater(t, len(masters), 1, "12 vouchers all landed on one master")

	var reserved atomic.Int64
	var wg sync.WaitGroup
	for _, code := range codes {
		for w := 0; w < 10; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				items := make([]Item, 10)
				for i := range items {
					items[i] = Item{CustomerID: int64(w*10 + i + 1), OrderID: fmt.Sprintf("%s-%d-%d", code, w, i), OrderAmount: testAmount}
				}
				rs, _, err := g.Reserve(ctx, code, items)
				if err != nil {
					t.Errorf("Reserve(%s) = %v", code, err)
					return
				}
				for _, r := range rs {
					if r == Reserved {
						reserved.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	assert.EqualValues(t, 40*len(codes), reserved.Load())
	for _, code := range codes {
		st, loaded, err := g.State(ctx, code)
		require.NoError(t, err)
		require.True(t, loaded)
		assert.Zero(t, st.Remaining, code)
		assert.Len(t, st.Orders, 40, code)
	}

	// NOSCRIPT after every master flushed its script cache: EVALSHA falls back to EVAL.
	cc := rdb.(*redis.ClusterClient)
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.ScriptFlush(ctx).Err()
	}))
	st, _, err := g.State(ctx, codes[0])
	require.NoError(t, err)
	require.NotEmpty(t, st.Orders)
	n, err := g.Release(ctx, codes[0], st.Orders[0].OrderID) // an order that holds a use
	require.NoError(t, err)
	assert.Equal(t, 1, n)

	// The five keys share one slot, so the scripts that touch done, and update's
	// rewrite of every key, run there too.
	slot, err := cc.ClusterKeySlot(ctx, Keys(codes[0])[0]).Result()
	require.NoError(t, err)
	for _, k := range Keys(codes[0]) {
		s, err := cc.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, slot, s, "slot of %s", k)
	}
	o := st.Orders[0]
	rs, _, err := g.Reserve(ctx, codes[0], []Item{{o.CustomerID, o.OrderID, testAmount}})
	require.NoError(t, err)
	assert.Equal(t, []Result{Finished}, rs)
	st, _, err = g.State(ctx, codes[0])
	require.NoError(t, err)
	assert.Equal(t, []string{o.OrderID}, st.Finished)
	m, _, _, err := g.Meta(ctx, codes[0])
	require.NoError(t, err)
	m.TotalLimit += 10
	up, err := g.Update(ctx, codes[0], m)
	require.NoError(t, err)
	assert.Equal(t, UpdateResult{Loaded: true, RemainingBefore: 1, RemainingAfter: 11}, up)
	rec, err := g.Reconcile(ctx, codes[0], m, st.Orders[1:], time.Minute)
	require.NoError(t, err)
	assert.Equal(t, ReconcileResult{Loaded: true, RemainingBefore: 11, RemainingAfter: 11, Released: []string{}}, rec)
}
