package systemtest

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestLogPathSaleThroughProxy: a 1,000-use writePath log voucher sold at once
// to 1,500 orders (750 customers, 2 each, perUserLimit 2) through a real proxy
// and ledger, whose admissions go through franz-go's in-process Kafka (kfake),
// with the ledger killed (-9) and restarted mid-sale; clients retry an
// unanswered order with its orderId, as the README asks. Once the consumer
// caught up, Postgres = Redis = the 201s exactly: every order answered 201 has
// its row, none has two, no oversell.
func TestLogPathSaleThroughProxy(t *testing.T) {
	t.Parallel()
	topic := "flashgate.admissions"
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic, topic+".dlt"))
	require.NoError(t, err)
	t.Cleanup(k.Close)
	s := newStack(t, stackOptions{coalesce: true, ledgerEnv: []string{
		"KAFKA_ADMISSIONS_BROKERS=" + k.ListenAddrs()[0], "HANGING_GRACE=2s"}})
	code := newCode(t)
	const total, customers, perUser = 1000, 750, 2
	r := call(t, "POST", s.LedgerURL+"/admin/vouchers", ledgerToken, map[string]any{
		"code": code, "discountAmount": 100_000, "minOrderAmount": 1_000, "totalLimit": total,
		"perUserLimit": perUser, "flashSale": true, "writePath": "log",
		"startsAt": time.Now().Add(-time.Hour).Format(time.RFC3339), "endsAt": time.Now().Add(time.Hour).Format(time.RFC3339),
	})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	s.trackFlash(code)
	knownAt(t, code, s.ProxyURL)

	type order struct {
		customer int64
		id       string
	}
	orders := make(chan order, customers*perUser)
	for c := 1; c <= customers; c++ {
		for o := 0; o < perUser; o++ {
			orders <- order{int64(c), fmt.Sprintf("%s-c%d-o%d", code, c, o)}
		}
	}
	close(orders)
	var mu sync.Mutex
	created := map[string]bool{}
	var outOfStock, done int
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for o := range orders {
				deadline := time.Now().Add(60 * time.Second)
				for {
					r := call(t, "POST", s.ProxyURL+"/vouchers/"+code+"/reservations", "",
						map[string]any{"customerId": o.customer, "orderId": o.id, "orderAmount": 5_000})
					mu.Lock()
					switch {
					case r.Status == http.StatusCreated:
						created[o.id] = true
					case r.Status == http.StatusConflict && r.Code() == "OUT_OF_STOCK":
						outOfStock++
					}
					mu.Unlock()
					if r.Status == http.StatusCreated || r.Status == http.StatusConflict {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("Reserve(%v) = %d %s for 60 s", o, r.Status, r.Raw)
						break
					}
					time.Sleep(50 * time.Millisecond) // 503 while the ledger restarts: retry the same orderId
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
		})
	}
	for {
		mu.Lock()
		n := done
		mu.Unlock()
		if n >= customers*perUser/3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Log("kill -9 ledger")
	require.NoError(t, s.Ledger.Kill())
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, s.Ledger.Restart())
	wg.Wait()

	require.Len(t, created, total, "orders answered 201 (%d answered OUT_OF_STOCK)", outOfStock)
	deadline := time.Now().Add(60 * time.Second)
	for s.db(t, code).Used != total && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	d := s.db(t, code)
	assert.Equal(t, total, d.Used, "used_count once the consumer caught up")
	assert.Equal(t, total, d.Active, "active rows")
	assert.LessOrEqual(t, d.MaxPerCustomer, perUser)
	active := s.activeOrders(t, code)
	for id := range created {
		assert.True(t, active[id], "order %s was answered 201 and has no active row", id)
	}
	st, loaded, err := s.gate.State(t.Context(), code)
	require.NoError(t, err)
	require.True(t, loaded)
	assert.EqualValues(t, 0, st.Remaining, "Redis remaining")
	assert.Len(t, st.Orders, total, "Redis orders")
}
