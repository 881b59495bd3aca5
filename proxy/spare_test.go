package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/proxy/internal/edge"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestFullBoundLetsHeldRetriesThrough: with every place in flight taken
// (MAX_INFLIGHT), a retry of an order this proxy answered 201 is not shed: it
// gets its 201 replayed from its row and takes no new use; a new order and
// the held orderId from another customer are shed. So is a new order of a
// voucher this proxy holds sold out (see Server.spare), but not a retry of an
// order admitted through another proxy that its sold-out flag knows held its
// use.
func TestFullBoundLetsHeldRetriesThrough(t *testing.T) {
	s := newStack(t, stackOptions{soldOutTTL: time.Minute, tap: true})
	code, gone := newCode(t), newCode(t)
	s.createVoucher(t, code, 10, 1, true)
	s.createVoucher(t, gone, 1, 1, true)
	require.Equal(t, 201, s.reserve(t, code, 1, code+"-a").Status)
	require.Equal(t, 201, s.reserve(t, gone, 1, gone+"-a").Status) // its last use: the flag is set
	require.True(t, s.admit.SoldOut(gone), "the sold-out flag")
	held := voucher.Claim{OrderID: code + "-a", CustomerID: 1, OrderAmount: 5_000}
	require.Eventually(t, func() bool { return s.admit.AdmittedHere(code, held) }, 5*time.Second, time.Millisecond,
		"the cache applies its writes in the background")

	const most = 2
	srv := &edge.Server{Admit: s.admit, Ledger: s.ledger, MaxInflight: most,
		Ready: func(context.Context) error { return nil }}
	h := srv.Handler()
	release, entered := make(chan struct{}), make(chan struct{}, most)
	h.GET("/hold", func(c *gin.Context) { entered <- struct{}{}; <-release })
	hs := httptest.NewServer(h)
	defer hs.Close()
	defer close(release)
	for range most {
		go func() {
			if resp, err := http.Get(hs.URL + "/hold"); err == nil {
				resp.Body.Close()
			}
		}()
	}
	for range most {
		<-entered
	}

	full := &stack{ProxyURL: hs.URL}
	r := full.reserve(t, code, 1, code+"-a")
	assert.Equal(t, 201, r.Status, "a retry of a held order at a full bound: %s", r.Raw)
	assert.True(t, replayed(r), "answered from its row")
	assert.Equal(t, 503, full.reserve(t, code, 2, code+"-b").Status, "a new order at a full bound")
	assert.Equal(t, 503, full.reserve(t, code, 3, code+"-a").Status, "the held orderId from another customer")
	assert.EqualValues(t, 9, s.redisRemaining(t, code), "the retry took no new use")

	// An order whose write is under way here (its 201 not yet remembered):
	// its retry holds its use already and is let through too.
	releaseW := s.tap.holdWrites()
	w := voucher.Claim{OrderID: code + "-w", CustomerID: 5, OrderAmount: 5_000}
	firstW := make(chan reply, 1)
	go func() { firstW <- s.reserve(t, code, 5, code+"-w") }()
	require.Eventually(t, func() bool { return s.admit.WritingHere(code, w) }, 5*time.Second, time.Millisecond)
	require.False(t, s.admit.AdmittedHere(code, w))
	retryW := make(chan reply, 1)
	go func() { retryW <- full.reserve(t, code, 5, code+"-w") }()
	require.Eventually(t, func() bool { return s.tap.held.Load() == 2 }, 10*time.Second, time.Millisecond,
		"the retry reached the ledger's write too")
	assert.Equal(t, 503, full.reserve(t, code, 6, code+"-w").Status, "its orderId from another customer")
	releaseW()
	require.Equal(t, 201, (<-firstW).Status)
	r = <-retryW
	assert.Equal(t, 201, r.Status, "a retry of an order being written, at a full bound: %s", r.Raw)
	assert.EqualValues(t, 8, s.redisRemaining(t, code), "the retry took no new use")

	assert.Equal(t, 503, full.reserve(t, gone, 2, gone+"-b").Status, "a new order of a voucher held sold out, at a full bound")

	// An order admitted through another proxy, its voucher then held sold out
	// here: the flag knows it held its use, so its retry is let through.
	elsewhere := newCode(t)
	s.createVoucher(t, elsewhere, 1, 1, true)
	other := startProxy(t, stackOptions{redisURL: devstacktest.RedisURL(t), soldOutTTL: time.Minute}, s.LedgerURL)
	first := other.reserve(t, elsewhere, 1, elsewhere+"-a")
	require.Equal(t, 201, first.Status, first.Raw)
	require.Equal(t, "OUT_OF_STOCK", s.reserve(t, elsewhere, 2, elsewhere+"-b").Code())
	a := voucher.Claim{OrderID: elsewhere + "-a", CustomerID: 1}
	require.False(t, s.admit.AdmittedHere(elsewhere, a) || s.admit.WritingHere(elsewhere, a), "not admitted here")
	require.True(t, s.admit.KnownToFlag(elsewhere, a.OrderID), "the flag knows it")
	assert.Empty(t, notReplay(first, full.reserve(t, elsewhere, 1, elsewhere+"-a")),
		"a retry of an order admitted elsewhere, known to the flag, at a full bound")
	assert.Equal(t, 503, full.reserve(t, elsewhere, 3, elsewhere+"-c").Status, "a new order of it at a full bound")
	assert.EqualValues(t, 0, s.redisRemaining(t, elsewhere))

	// An order admitted through another proxy, its voucher not sold out: the
	// other proxy named it on the held-orders channel, so its retry here is let through
	// too, and takes no new use.
	open := newCode(t)
	s.createVoucher(t, open, 10, 1, true)
	first = other.reserve(t, open, 1, open+"-a")
	require.Equal(t, 201, first.Status, first.Raw)
	a = voucher.Claim{OrderID: open + "-a", CustomerID: 1}
	require.Eventually(t, func() bool { return s.admit.HeldElsewhere(open, a) }, 5*time.Second, 5*time.Millisecond,
		"named by the other proxy")
	require.False(t, s.admit.AdmittedHere(open, a) || s.admit.WritingHere(open, a) || s.admit.KnownToFlag(open, a.OrderID))
	assert.Empty(t, notReplay(first, full.reserve(t, open, 1, open+"-a")),
		"a retry of an order admitted elsewhere, its voucher not sold out, at a full bound")
	assert.Equal(t, 503, full.reserve(t, open, 3, open+"-a").Status, "its orderId from another customer")
	assert.Equal(t, 503, full.reserve(t, open, 2, open+"-b").Status, "a new order at a full bound")
	assert.EqualValues(t, 9, s.redisRemaining(t, open), "the retry took no new use")
}
