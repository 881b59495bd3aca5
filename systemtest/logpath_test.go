package systemtest

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// admissionsTopic is the ledger's default KAFKA_ADMISSIONS_TOPIC.
const admissionsTopic = "flashgate.admissions"

// TestLogPathSaleThroughProxy: a 1,000-use writePath log voucher sold at once
// to 3,000 orders (1,000 customers, 3 each, perUserLimit 2) by 48 clients
// through a real proxy and ledger, whose admissions go through franz-go's
// in-process Kafka (kfake) with its log on disk; mid-sale the ledger is
// killed (-9) and restarted, and later the broker is stopped and started
// again on the same port from its files. Clients retry an unanswered order
// with its orderId, as the README asks, and send every fifth order once more
// after its answer. Once the consumer caught up, exactly: the orders answered
// 201 = Postgres's rows of the voucher = used_count = the uses Redis took,
// order for order; every order answered 201 answered 201 again; nothing
// dead-lettered.
func TestLogPathSaleThroughProxy(t *testing.T) {
	t.Parallel()
	k := startPersistedKafka(t)
	s := newStack(t, stackOptions{coalesce: true, ledgerEnv: []string{
		"KAFKA_ADMISSIONS_BROKERS=" + k.addr, "HANGING_GRACE=2s",
		// The killed ledger's partitions come back to the group after this.
		"KAFKA_ADMISSIONS_SESSION_TIMEOUT=6s"}})
	code := newCode(t)
	const total, customers, perCustomer, perUser = 1000, 1000, 3, 2
	r := call(t, "POST", s.LedgerURL+"/admin/vouchers", ledgerToken, map[string]any{
		"code": code, "discountAmount": 100_000, "minOrderAmount": 1_000, "totalLimit": total,
		"perUserLimit": perUser, "flashSale": true, "writePath": "log",
		"startsAt": time.Now().Add(-time.Hour).Format(time.RFC3339), "endsAt": time.Now().Add(time.Hour).Format(time.RFC3339),
	})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	s.trackFlash(code)
	knownAt(t, code, s.ProxyURL)

	sale := &logSale{s: s, code: code, answer: map[string]string{}, over: make(chan struct{})}
	faults := make(chan int)
	go func() {
		n := 0
		defer func() { faults <- n }()
		if !sale.waitCreated(300) {
			return
		}
		t.Logf("kill -9 the ledger at %d orders answered 201", sale.count201())
		assert.NoError(t, s.Ledger.Kill())
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, s.Ledger.Restart())
		if n++; !sale.waitCreated(650) {
			return
		}
		at := sale.count201()
		gone, err := k.restart(200 * time.Millisecond)
		assert.NoError(t, err, "start the broker again")
		t.Logf("broker stopped at %d orders answered 201 and started again from its files: gone %s", at, gone)
		n++
	}()
	start := time.Now()
	sale.run(t, customers, perCustomer, 48)
	close(sale.over)
	sold := time.Since(start)
	require.Equal(t, 2, <-faults, "faults injected mid-sale (the ledger killed, the broker restarted)")

	created := sale.created()
	require.Len(t, created, total, "orders answered 201")
	start = time.Now()
	deadline := start.Add(30 * time.Second)
	for s.db(t, code).Used != len(created) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the sale took %s; Postgres held every 201 %s after it", sold.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	d := s.db(t, code)
	rows := s.orderRows(t, code)
	st, loaded, err := s.gate.State(t.Context(), code)
	require.NoError(t, err)
	require.True(t, loaded)
	held := map[string]bool{}
	for _, o := range st.Orders {
		held[o.OrderID] = true
	}
	dead := k.records(t, admissionsTopic+".dlt")
	r = call(t, "GET", s.LedgerURL+"/admin/admissions/failed?all=true", ledgerToken, nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	failed, _ := r.Body["admissions"].([]any)
	t.Logf("%d orders, %d answered 201, %s; %d sent again after their answer, %d retries after a 503 or 429; "+
		"Postgres: %d rows, used_count %d; Redis: %d uses taken, %d orders held; %d records in the log, %d dead-lettered, %d failed admissions",
		customers*perCustomer, len(created), sale.refusals(), sale.again, sale.retries, len(rows), d.Used,
		total-int(st.Remaining), len(st.Orders), k.records(t, admissionsTopic), dead, len(failed))

	assert.Equal(t, len(created), len(rows), "Postgres's rows of the voucher")
	assert.Equal(t, len(created), d.Active, "active rows")
	assert.Equal(t, len(created), d.Used, "used_count")
	assert.Equal(t, len(created), total-int(st.Remaining), "uses Redis took")
	assert.Len(t, st.Orders, len(created), "orders Redis holds")
	for id := range created {
		assert.Equal(t, "RESERVED", rows[id], "order %s was answered 201", id)
		assert.True(t, held[id], "order %s was answered 201 and Redis does not hold it", id)
	}
	for id, status := range rows {
		assert.True(t, created[id], "order %s has a %s row and was never answered 201", id, status)
	}
	assert.LessOrEqual(t, d.MaxPerCustomer, perUser)
	assert.Empty(t, sale.broken, "orders answered 201 and then otherwise")
	assert.Zero(t, dead, "records in the dead-letter topic")
	assert.Empty(t, failed, "failed admissions")
}

// logSale is a sale through s's proxy: each order's final answer (201, or a
// 409's error code), and what was sent to get them.
type logSale struct {
	s       *stack
	code    string
	mu      sync.Mutex
	answer  map[string]string // orderId -> "201" or the 409's code
	n201    int               // orders answered 201
	over    chan struct{}     // closed once every order was answered
	broken  []string          // orders answered 201 and then otherwise
	retries int               // sends of an order after a 503 or a 429
	again   int               // sends of an order after its final answer
}

// run sends perCustomer orders for each of customers through workers
// clients, each order until its final answer (a 503 or 429 is retried with
// the same orderId for up to 60 s), and every fifth order once more after it.
func (ls *logSale) run(t *testing.T, customers, perCustomer, workers int) {
	type order struct {
		customer int64
		id       string
		again    bool
	}
	orders := make(chan order, customers*perCustomer)
	for c, i := 1, 0; c <= customers; c++ {
		for o := range perCustomer {
			orders <- order{int64(c), fmt.Sprintf("%s-c%d-o%d", ls.code, c, o), i%5 == 0}
			i++
		}
	}
	close(orders)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for o := range orders {
				first := ls.send(t, o.customer, o.id)
				if o.again && first != "" {
					ls.mu.Lock()
					ls.again++
					ls.mu.Unlock()
					ls.send(t, o.customer, o.id)
				}
			}
		})
	}
	wg.Wait()
}

// send reserves one order until its final answer and records it: "201", a
// 409's code, or "" when none came within 60 s (an error of the test).
func (ls *logSale) send(t *testing.T, customer int64, id string) string {
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := call(t, "POST", ls.s.ProxyURL+"/vouchers/"+ls.code+"/reservations", "",
			map[string]any{"customerId": customer, "orderId": id, "orderAmount": 5_000})
		var got string
		switch r.Status {
		case http.StatusCreated:
			got = strconv.Itoa(r.Status)
		case http.StatusConflict:
			got = r.Code()
		}
		ls.mu.Lock()
		prev, ok := ls.answer[id]
		switch {
		case got == "":
			ls.retries++
		case ok && prev == "201" && got != "201":
			// A 201 is a promise: every send of the order again is a 201.
			ls.broken = append(ls.broken, fmt.Sprintf("%s: 201 then %s", id, got))
		case !ok || (prev != "201" && got == "201"):
			// A refusal is no promise: a send again is decided anew.
			ls.answer[id] = got
			if got == "201" {
				ls.n201++
			}
		}
		ls.mu.Unlock()
		if got != "" {
			return got
		}
		if time.Now().After(deadline) {
			t.Errorf("Reserve(%s) = %d %s for 60 s", id, r.Status, r.Raw)
			return ""
		}
		time.Sleep(50 * time.Millisecond) // 503 while the ledger or the broker restarts
	}
}

// created is the orders answered 201.
func (ls *logSale) created() map[string]bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := map[string]bool{}
	for id, a := range ls.answer {
		if a == "201" {
			out[id] = true
		}
	}
	return out
}

// refusals counts the orders answered 409, by code.
func (ls *logSale) refusals() string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := map[string]int{}
	for _, a := range ls.answer {
		if a != "201" {
			n[a]++
		}
	}
	return fmt.Sprintf("409 %v", n)
}

// count201 is how many orders were answered 201.
func (ls *logSale) count201() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.n201
}

// waitCreated waits until n orders were answered 201 (true), or every order
// was answered (false).
func (ls *logSale) waitCreated(n int) bool {
	for {
		if ls.count201() >= n {
			return true
		}
		select {
		case <-ls.over:
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// orderRows is every row of voucher code by orderId, with its status.
func (s *stack) orderRows(tb testing.TB, code string) map[string]string {
	tb.Helper()
	rows, err := s.pool.Query(tb.Context(), `SELECT order_id, status FROM voucher_redemption WHERE voucher_code = $1`, code)
	require.NoError(tb, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, status string
		require.NoError(tb, rows.Scan(&id, &status))
		out[id] = status
	}
	require.NoError(tb, rows.Err())
	return out
}

// persistedKafka is franz-go's in-process Kafka (kfake), one broker with the
// admissions topic and its dead-letter topic (4 partitions each), whose log
// is on disk with every produce synced before its ack: it can be stopped and
// started again on the same port with every acknowledged record, its
// producers' sequence numbers and its groups' committed offsets.
type persistedKafka struct {
	addr string
	opts []kfake.Opt
	mu   sync.Mutex
	c    *kfake.Cluster
}

func startPersistedKafka(tb testing.TB) *persistedKafka {
	tb.Helper()
	k := &persistedKafka{opts: []kfake.Opt{kfake.NumBrokers(1), kfake.DataDir(tb.TempDir()), kfake.SyncWrites(),
		kfake.SeedTopics(4, admissionsTopic, admissionsTopic+".dlt")}}
	var err error
	k.c, err = kfake.NewCluster(k.opts...)
	require.NoError(tb, err)
	k.addr = k.c.ListenAddrs()[0]
	_, port, err := net.SplitHostPort(k.addr)
	require.NoError(tb, err)
	p, err := strconv.Atoi(port)
	require.NoError(tb, err)
	k.opts = append(k.opts, kfake.Ports(p))
	tb.Cleanup(func() { k.mu.Lock(); defer k.mu.Unlock(); k.c.Close() })
	return k
}

// restart stops the broker (its connections cut, requests in flight
// unanswered), keeps it down for down, and starts it again from its files;
// it returns how long the broker was gone.
func (k *persistedKafka) restart(down time.Duration) (time.Duration, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	start := time.Now()
	k.c.Close()
	time.Sleep(down)
	c, err := kfake.NewCluster(k.opts...)
	if err != nil {
		return 0, err
	}
	k.c = c
	return time.Since(start), nil
}

// records is how many records topic holds, over its partitions.
func (k *persistedKafka) records(tb testing.TB, topic string) int64 {
	tb.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	infos := k.c.PartitionInfos(topic)
	require.NotEmpty(tb, infos, "topic %s", topic)
	var n int64
	for _, p := range infos {
		n += p.HighWatermark - p.LogStartOffset
	}
	return n
}
