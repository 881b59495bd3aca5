package limits

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-redis/redis_rate/v10"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// BenchmarkClientBucket is the price of CLIENT_RATE on every reserve: a token
// from an in-process bucket, over 10,000 client keys, in parallel.
func BenchmarkClientBucket(b *testing.B) {
	bk := newBuckets(1_000_000, 1_000_000, maxClientBuckets)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "192.0.2." + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			bk.take(keys[i%len(keys)], time.Now())
			i++
		}
	})
}

// BenchmarkCustomerBucketRedis is the price of the same decision made in
// Redis (go-redis/redis_rate's GCRA script), as CUSTOMER_RATE makes it: one
// round trip per reserve, in parallel over the proxy's Redis client.
func BenchmarkCustomerBucketRedis(b *testing.B) {
	rdb, err := gate.NewClient(devstacktest.RedisURL(b), gate.ClientOptions{Timeout: time.Second})
	require.NoError(b, err)
	b.Cleanup(func() { rdb.Close() })
	cl := &customerLimiter{rl: redis_rate.NewLimiter(rdb), timeout: time.Second,
		limit: redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int64(0)
		for pb.Next() {
			if _, _, err := cl.take(ctx, "BENCH", i%10_000); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkChargeReserve is what the limits cost a reserve at their defaults
// (early retries refused, no client or customer rate) while no refusal is
// remembered: a sale going well. Nothing is allocated: the order's key is
// made only when a refusal needs it.
func BenchmarkChargeReserve(b *testing.B) {
	l := New(Config{EarlyRetries: true}, nil, nil)
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodPost, "/vouchers/BENCH/reservations", nil)
	cl := voucher.Claim{CustomerID: 42, OrderID: "bench-order-1", OrderAmount: 5000}
	b.ReportAllocs()
	for b.Loop() {
		order, ok := l.ChargeReserve(c, "BENCH", cl)
		if !ok {
			b.Fatal("ChargeReserve refused")
		}
		l.RememberRefusal(c, order)
	}
}
