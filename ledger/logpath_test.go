package main

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
)

// newKafka starts franz-go's in-process Kafka with the admissions topic and
// its dead-letter topic, partitions partitions each.
func newKafka(tb testing.TB, partitions int32) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, admissions.DefaultTopic, admissions.DeadLetterTopic(admissions.DefaultTopic)))
	require.NoError(tb, err)
	tb.Cleanup(c.Close)
	return c
}

// consume runs a member of l's admissions consumer group until the returned
// func stops it (and waits for it), or the test ends.
func (l *testLedger) consume(tb testing.TB) (stop func()) {
	tb.Helper()
	c, err := l.svc.newConsumer()
	require.NoError(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)
	return stop
}

// waitUsed waits until code's used_count reaches want (the consumer caught up).
func (l *testLedger) waitUsed(tb testing.TB, code string, want int) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := l.counts(tb, code).Used
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			require.Equal(tb, want, got, "used_count of %s once the consumer caught up", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLogPathSale: a 1,000-use writePath log voucher sold to 1,500 orders at
// once (500 customers over the limit, 2 orders each) through the ledger's
// reserve route (the gate, then the admissions log) ends with exactly the
// 201s in Postgres and in Redis, with the consumer stopped mid-sale and
// another member started: none lost, none doubled, no oversell.
func TestLogPathSale(t *testing.T) {
	t.Parallel()
	k := newKafka(t, 4)
	l := newTestLedger(t, ledgerOptions{kafka: k.ListenAddrs()})
	code := newCode(t)
	const total = 1000
	r := l.call(t, http.MethodPost, "/admin/vouchers", pathSpec{spec(code, total, 2, true), "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.checks.addFlash(code)

	stop := l.consume(t)
	cs := claims(code, 750, 2, "log")
	var created, refused atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i, c := range cs {
		if i == len(cs)/2 {
			wg.Wait()
			stop() // mid-sale: the next member starts from the committed offsets
			stop = l.consume(t)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			r := l.reserve(t, code, c.customer, c.order, 5_000)
			switch r.Status {
			case http.StatusCreated:
				created.Add(1)
			case http.StatusConflict:
				refused.Add(1)
			default:
				t.Errorf("Reserve(%v) = %d %s, want 201 or 409", c, r.Status, r.Raw)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, total, created.Load(), "201s of %d orders for %d uses", len(cs), total)
	assert.EqualValues(t, len(cs)-total, refused.Load())
	l.waitUsed(t, code, total)
	c := l.counts(t, code)
	assert.Equal(t, total, c.Rows, "rows")
	assert.LessOrEqual(t, c.MaxPerCustomer, 2)
	st := redisState(t, l.gate, code)
	assert.EqualValues(t, 0, st.Remaining, "Redis remaining")
	assert.Len(t, st.Orders, total, "Redis orders")
}
