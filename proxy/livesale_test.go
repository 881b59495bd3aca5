package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// each runs f(0..n-1) on at most inflight goroutines at once and returns the
// replies in order.
func each(n, inflight int, f func(i int) reply) []reply {
	out := make([]reply, n)
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = f(i)
		}()
	}
	wg.Wait()
	return out
}

// admin calls one of the ledger's admin routes.
func (s *stack) admin(tb testing.TB, method, path string, body any) reply {
	tb.Helper()
	return call(tb, method, s.LedgerURL+path, "test-token", body)
}

// answered calls f again while it answers 503, as a client honouring the
// answer's "retry with the same orderId" does, up to 20 times: on a busy
// machine a burst of payments, or of held orders' retries (each one the
// ledger's idempotent write), can find Postgres's connections taken past
// DB_TIMEOUT, a fast 503 by design (make test beside a CPU hog saw one
// replay in 600 answered so), and a test about what the answers say must not
// count that as its outcome.
func answered(f func() reply) reply {
	r := f()
	for range 20 {
		if r.Status != http.StatusServiceUnavailable {
			return r
		}
		time.Sleep(50 * time.Millisecond)
		r = f()
	}
	return r
}

// order calls one order's route on the proxy: suffix "" (GET, DELETE),
// "/confirm" or "/refund" (POST).
func (s *stack) order(tb testing.TB, method, code, orderID, suffix string) reply {
	tb.Helper()
	return call(tb, method, s.ProxyURL+"/vouchers/"+code+"/reservations/"+orderID+suffix, "", nil)
}

// rows counts the voucher's reservation rows, whatever their status.
func (s *stack) rows(tb testing.TB, code string) int {
	tb.Helper()
	var n int
	require.NoError(tb, s.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM voucher_redemption WHERE voucher_code = $1`, code).Scan(&n))
	return n
}

// flagged reports whether this proxy holds a sold-out flag for code.
func (s *stack) flagged(code string) bool {
	return s.admit.SoldOut(code)
}

// replayed reports whether an answer says it replays the order's first one.
func replayed(r reply) bool { return r.Header.Get(api.HeaderReplayed) == "true" }

// notReplay says how r fails to replay first (201, the same body, the
// header); "" when it does.
func notReplay(first, r reply) string {
	if r.Status == 201 && replayed(r) && r.Raw == first.Raw {
		return ""
	}
	return fmt.Sprintf("%d %s (replayed %v), want 201 %s replayed", r.Status, r.Raw, replayed(r), first.Raw)
}

// notError says how r fails to be the error status, code and (for
// NOT_ELIGIBLE) reason; "" when it is.
func notError(r reply, status int, code, reason string) string {
	if got, _ := r.Body["reason"].(string); r.Status == status && r.Code() == code && got == reason {
		return ""
	}
	return fmt.Sprintf("%d %s, want %d %s %s", r.Status, r.Raw, status, code, reason)
}

func wantReplay(t *testing.T, first, r reply, what string) {
	t.Helper()
	if p := notReplay(first, r); p != "" {
		t.Errorf("%s = %s", what, p)
	}
}

func wantError(t *testing.T, r reply, status int, code, reason, what string) {
	t.Helper()
	if p := notError(r, status, code, reason); p != "" {
		t.Errorf("%s = %s", what, p)
	}
}

// checkEach reports the replies whose problem(i, r) is not "": how many, and
// the first few.
func checkEach(t *testing.T, what string, replies []reply, problem func(i int, r reply) string) {
	t.Helper()
	var bad []string
	for i, r := range replies {
		if p := problem(i, r); p != "" {
			bad = append(bad, fmt.Sprintf("%s #%d = %s", what, i, p))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d replies wrong, the first: %v", len(bad), len(replies), bad[:min(3, len(bad))])
	}
}

// A paused flash voucher is refused by the reserve script: 422 PAUSED for
// every new order, whatever terms the proxy cached, and nothing reaches the
// ledger; a held order's retry still gets its 201. A paused standard voucher
// is refused by the ledger, through the proxy.
func TestPausedVoucherRefusedWithoutWrite(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true})
	flash, std := newCode(t), newCode(t)
	s.createVoucher(t, flash, 10, 1, true)
	s.createVoucher(t, std, 10, 1, false)
	held := s.reserve(t, flash, 1, flash+"-held")
	require.Equal(t, 201, held.Status, held.Raw)
	for _, code := range []string{flash, std} {
		r := s.admin(t, "POST", "/admin/vouchers/"+code+"/pause", nil)
		require.Equal(t, 200, r.Status, r.Raw)
	}

	calls := s.gate.Calls()
	replies := each(500, 64, func(i int) reply {
		return s.reserve(t, flash, int64(100+i), fmt.Sprintf("%s-p%d", flash, i))
	})
	checkEach(t, "Reserve(new order, paused)", replies, func(_ int, r reply) string {
		return notError(r, 422, "NOT_ELIGIBLE", "PAUSED")
	})
	assert.Greater(t, s.gate.Calls(), calls, "the reserve script answered")
	assert.Equal(t, 1, s.rows(t, flash), "no reservation row for a paused voucher")
	assert.EqualValues(t, 9, s.redisRemaining(t, flash))
	wantReplay(t, held, s.reserve(t, flash, 1, flash+"-held"), "Reserve(held order, paused)")
	wantError(t, s.reserve(t, std, 1, std+"-1"), 422, "NOT_ELIGIBLE", "PAUSED", "Reserve(standard, paused)")
	assert.Equal(t, 0, s.rows(t, std))

	for _, code := range []string{flash, std} {
		r := s.admin(t, "POST", "/admin/vouchers/"+code+"/resume", nil)
		require.Equal(t, 200, r.Status, r.Raw)
		r = s.reserve(t, code, 2, code+"-after")
		assert.Equal(t, 201, r.Status, "Reserve(%s, resumed) = %d %s", code, r.Status, r.Raw)
	}
}

// After the window ends, a retry of a held order replays its 201 (header on
// the single route, "replayed" relayed from the batch route) and a new order
// gets 422 EXPIRED from the script; many at once, exact counts.
func TestWindowEndedRetryReplays(t *testing.T) {
	t.Parallel()
	for _, coalesce := range []bool{true, false} {
		t.Run(fmt.Sprintf("coalesce=%v", coalesce), func(t *testing.T) {
			t.Parallel()
			s := newStack(t, stackOptions{coalesce: coalesce})
			code := newCode(t)
			ends := time.Now().Add(2 * time.Second)
			body := voucherBody(code, 10, 1, true)
			body["endsAt"] = ends.UTC().Format(time.RFC3339Nano)
			s.create(t, body)
			first := make([]reply, 3)
			for k := range first {
				first[k] = s.reserve(t, code, int64(k+1), fmt.Sprintf("%s-h%d", code, k))
				require.Equal(t, 201, first[k].Status, first[k].Raw)
				require.False(t, replayed(first[k]), "a first answer is not a replay")
			}
			time.Sleep(time.Until(ends) + 100*time.Millisecond)

			replies := each(600, 64, func(i int) reply {
				if k := (i / 2) % 3; i%2 == 0 {
					return answered(func() reply { return s.reserve(t, code, int64(k+1), fmt.Sprintf("%s-h%d", code, k)) })
				}
				return s.reserve(t, code, int64(100+i), fmt.Sprintf("%s-n%d", code, i))
			})
			checkEach(t, "Reserve(after the window)", replies, func(i int, r reply) string {
				if i%2 == 0 {
					return notReplay(first[(i/2)%3], r)
				}
				return notError(r, 422, "NOT_ELIGIBLE", "EXPIRED")
			})
			assert.Equal(t, 3, s.rows(t, code))
			assert.Equal(t, dbState{Used: 3, Active: 3, Remaining: 7, MaxPerCustomer: 1}, s.db(t, code))
			assert.EqualValues(t, 7, s.redisRemaining(t, code))
		})
	}
}

// The sold-out flag lets through the orders Redis knew when it was set, held
// and finished alike: held ones replay their 201, a released one gets 409
// RESERVATION_RELEASED (not OUT_OF_STOCK), and only new orders are answered
// by the flag (exactly as many flag hits as new orders).
func TestSoldOutFlagPassesKnownOrders(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true, soldOutTTL: time.Minute})
	code := newCode(t)
	s.createVoucher(t, code, 20, 1, true)
	released := code + "-released"
	require.Equal(t, 201, s.reserve(t, code, 1, released).Status)
	r := s.order(t, "DELETE", code, released, "")
	require.Equal(t, 204, r.Status, r.Raw)
	// Let the change the ledger published for the release land first, so that
	// it does not drop the flag set below.
	time.Sleep(200 * time.Millisecond)
	held := each(20, 20, func(i int) reply {
		return answered(func() reply { return s.reserve(t, code, int64(10+i), fmt.Sprintf("%s-h%d", code, i)) })
	})
	for i, r := range held {
		require.Equal(t, 201, r.Status, "Reserve(h%d) = %s", i, r.Raw)
	}
	r = s.reserve(t, code, 99, code+"-probe")
	require.Equal(t, "OUT_OF_STOCK", r.Code(), r.Raw)
	require.True(t, s.flagged(code), "sold out: the flag is set")

	hits := s.metric(t, "flashgate_soldout_flag_hits_total")
	replies := each(1200, 128, func(i int) reply {
		switch i % 3 {
		case 0:
			return s.reserve(t, code, 1, released)
		case 1:
			k := (i / 3) % 20
			return answered(func() reply { return s.reserve(t, code, int64(10+k), fmt.Sprintf("%s-h%d", code, k)) })
		}
		return s.reserve(t, code, int64(1000+i), fmt.Sprintf("%s-n%d", code, i))
	})
	checkEach(t, "Reserve(sold out)", replies, func(i int, r reply) string {
		switch i % 3 {
		case 0:
			return notError(r, 409, "RESERVATION_RELEASED", "")
		case 1:
			return notReplay(held[(i/3)%20], r)
		}
		return notError(r, 409, "OUT_OF_STOCK", "")
	})
	assert.Equal(t, 400.0, s.metric(t, "flashgate_soldout_flag_hits_total")-hits, "flag hits: exactly the new orders")
	assert.True(t, s.flagged(code), "the flag stayed up")
	assert.Equal(t, 21, s.rows(t, code))
	assert.Equal(t, dbState{Used: 20, Active: 20, Remaining: 0, MaxPerCustomer: 1}, s.db(t, code))
	assert.EqualValues(t, 0, s.redisRemaining(t, code))
}

// A retry with another amount or another customer is 409 ORDER_CONFLICT at
// the proxy, for flash (also under the sold-out flag) and standard vouchers;
// the same retry replays. Many at once, exact counts, one row.
func TestOrderConflictOnChangedRetry(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true, soldOutTTL: time.Minute})
	flash, std := newCode(t), newCode(t)
	s.createVoucher(t, flash, 1, 1, true)
	s.createVoucher(t, std, 1, 1, false)
	for _, code := range []string{flash, std} {
		kind := map[bool]string{true: "flash", false: "standard"}[code == flash]
		order := code + "-1"
		first := s.reserveAmount(t, code, 1, order, 5_000)
		require.Equal(t, 201, first.Status, first.Raw)
		assert.EqualValues(t, 1_000, first.Body["discountAmount"])
		assert.Equal(t, "OUT_OF_STOCK", s.reserve(t, code, 2, code+"-2").Code())
		if code == flash {
			require.True(t, s.flagged(code))
		}
		replies := each(300, 64, func(i int) reply {
			switch i % 3 {
			case 0:
				return answered(func() reply { return s.reserveAmount(t, code, 1, order, 5_000) })
			case 1:
				return s.reserveAmount(t, code, 1, order, 6_000)
			}
			return s.reserveAmount(t, code, 3, order, 5_000)
		})
		checkEach(t, "Reserve("+kind+" retry)", replies, func(i int, r reply) string {
			if i%3 == 0 {
				return notReplay(first, r)
			}
			return notError(r, 409, "ORDER_CONFLICT", "")
		})
		assert.Equal(t, 1, s.rows(t, code))
		assert.Equal(t, dbState{Used: 1, Active: 1, Remaining: 0, MaxPerCustomer: 1}, s.db(t, code))
	}
	assert.EqualValues(t, 0, s.redisRemaining(t, flash))
}

// Refund through the proxy: the ledger's answers relayed, and a 200 drops
// this proxy's sold-out flag so the use sells again at once.
func TestRefundThroughProxy(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true, soldOutTTL: time.Minute})
	code := newCode(t)
	s.createVoucher(t, code, 1, 1, true)
	order := code + "-1"
	require.Equal(t, 201, s.reserveAmount(t, code, 1, order, 200_000).Status)
	wantError(t, s.order(t, "POST", code, order, "/refund"), 409, "NOT_CONFIRMED", "", "Refund(reserved)")
	wantError(t, s.order(t, "POST", code, code+"-nope", "/refund"), 404, "RESERVATION_NOT_FOUND", "", "Refund(unknown)")
	r := s.order(t, "POST", code, order, "/confirm")
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "OUT_OF_STOCK", s.reserve(t, code, 2, code+"-2").Code())
	require.True(t, s.flagged(code))

	r = s.order(t, "POST", code, order, "/refund")
	require.Equal(t, 200, r.Status, r.Raw)
	assert.Equal(t, map[string]any{"orderId": order, "status": "REFUNDED", "discountAmount": float64(1_000)}, r.Body)
	assert.False(t, s.flagged(code), "a refund drops the flag")
	again := s.order(t, "POST", code, order, "/refund")
	assert.Equal(t, 200, again.Status, again.Raw)
	assert.JSONEq(t, r.Raw, again.Raw, "a refund is idempotent")
	wantError(t, s.order(t, "POST", code, order, "/confirm"), 409, "RESERVATION_REFUNDED", "", "Confirm(refunded)")
	wantError(t, s.reserveAmount(t, code, 1, order, 200_000), 409, "RESERVATION_REFUNDED", "", "Reserve(refunded retry)")
	assert.Equal(t, 204, s.order(t, "DELETE", code, order, "").Status, "Release(refunded)")
	assert.Equal(t, 201, s.reserve(t, code, 2, code+"-2").Status, "the refunded use sells again")
	assert.Equal(t, dbState{Used: 1, Active: 1, Remaining: 0, MaxPerCustomer: 1}, s.db(t, code))
	assert.EqualValues(t, 0, s.redisRemaining(t, code))
}

// Many refunds of the same orders at once give each use back exactly once,
// and exactly those uses sell again.
func TestConcurrentRefundsGiveUsesBackOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true, soldOutTTL: time.Minute})
	code := newCode(t)
	s.createVoucher(t, code, 30, 1, true)
	orderOf := func(k int) string { return fmt.Sprintf("%s-c%d", code, k) }
	for i, r := range each(30, 30, func(k int) reply {
		return answered(func() reply { return s.reserve(t, code, int64(k+1), orderOf(k)) })
	}) {
		require.Equal(t, 201, r.Status, "Reserve(%d) = %s", i, r.Raw)
	}
	for i, r := range each(30, 30, func(k int) reply {
		return answered(func() reply { return s.order(t, "POST", code, orderOf(k), "/confirm") })
	}) {
		require.Equal(t, 200, r.Status, "Confirm(%d) = %s", i, r.Raw)
	}
	require.Equal(t, "OUT_OF_STOCK", s.reserve(t, code, 999, code+"-x").Code())

	refunds := each(120, 120, func(i int) reply {
		return answered(func() reply { return s.order(t, "POST", code, orderOf(i%30), "/refund") })
	})
	checkEach(t, "Refund", refunds, func(_ int, r reply) string {
		if r.Status != 200 || r.Body["status"] != "REFUNDED" {
			return fmt.Sprintf("%d %s, want 200 REFUNDED", r.Status, r.Raw)
		}
		return ""
	})
	assert.Equal(t, dbState{Used: 0, Active: 0, Remaining: 30, MaxPerCustomer: 0}, s.db(t, code))
	// A refund whose commit passed DB_TIMEOUT (a busy machine) is answered
	// from its row on retry, and its use comes back through the ledger's
	// settler a moment later: Redis agrees once it has run, not at the answer.
	require.Eventually(t, func() bool { return s.redisRemaining(t, code) == 30 }, 15*time.Second, 50*time.Millisecond,
		"every refunded use back in Redis")

	replies := each(360, 128, func(i int) reply {
		return answered(func() reply {
			if i%6 == 0 {
				return s.reserve(t, code, int64(i/6%30+1), orderOf(i/6%30))
			}
			return s.reserve(t, code, int64(1000+i), fmt.Sprintf("%s-n%d", code, i))
		})
	})
	created := 0
	checkEach(t, "Reserve(after refunds)", replies, func(i int, r reply) string {
		switch {
		case i%6 == 0:
			return notError(r, 409, "RESERVATION_REFUNDED", "")
		case r.Status == 201:
			created++
			return ""
		}
		return notError(r, 409, "OUT_OF_STOCK", "")
	})
	assert.Equal(t, 30, created, "exactly the refunded uses sold again")
	assert.Equal(t, dbState{Used: 30, Active: 30, Remaining: 0, MaxPerCustomer: 1}, s.db(t, code))
	assert.EqualValues(t, 0, s.redisRemaining(t, code))
}

// A use given back to a sold-out voucher reaches every proxy's sold-out flag,
// not only the flag of the proxy that took it: the script that gives it back
// (as the ledger's does when the write of an admitted order failed) names the
// voucher on the change channel. Else proxy B, whose flag knows only the orders
// Redis held when it was set, answers OUT_OF_STOCK to the retry of an order
// proxy A admitted with that use, which holds it (the chaos soak's pg-restart
// round caught it). Two proxies over one Redis, the flag set for a minute.
func TestGiveBackDropsEveryProxysSoldOutFlag(t *testing.T) {
	t.Parallel()
	o := stackOptions{redisURL: devstacktest.RedisURL(t), dbURL: devstacktest.PostgresURL(t), coalesce: true,
		soldOutTTL: time.Minute}
	a := newStack(t, o)
	b := startProxy(t, o, a.LedgerURL)
	code := newCode(t)
	a.createVoucher(t, code, 1, 1, true)
	ctx := context.Background()

	// An admission whose write will fail: it holds the only use in Redis.
	got, _, err := a.gate.Reserve(ctx, code, []gate.Item{{CustomerID: 1, OrderID: code + "-failed", OrderAmount: 5_000}})
	require.NoError(t, err)
	require.Equal(t, []gate.Result{gate.Reserved}, got)

	// B answers sold out, and its watcher is subscribed (published until it
	// lands); then B's flag is set again, knowing only the failed order.
	require.Equal(t, "OUT_OF_STOCK", b.reserve(t, code, 2, code+"-2").Code())
	require.Eventually(t, func() bool {
		return gate.PublishChange(ctx, b.rdb, code) == nil && !b.flagged(code)
	}, 5*time.Second, 20*time.Millisecond, "B's watcher drops its flag")
	// Every change published above has reached B's watcher: a late one would
	// drop the flag set next (a fresh-clone .ci/run saw it, 2026-12-05).
	require.NoError(t, b.watcher.Sync(ctx))
	require.Equal(t, "OUT_OF_STOCK", b.reserve(t, code, 3, code+"-3").Code())
	require.True(t, b.flagged(code), "B holds the voucher sold out")

	n, err := a.gate.GiveBack(ctx, code, code+"-failed")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool { return !b.flagged(code) }, 2*time.Second, 5*time.Millisecond,
		"the give-back's change reached B's flag")

	first := a.reserve(t, code, 4, code+"-4")
	require.Equal(t, 201, first.Status, first.Raw)
	assert.Empty(t, notReplay(first, b.reserve(t, code, 4, code+"-4")), "the retry through B replays A's 201")
	assert.Equal(t, "OUT_OF_STOCK", b.reserve(t, code, 5, code+"-5").Code())
	assert.Equal(t, dbState{Used: 1, Active: 1, Remaining: 0, MaxPerCustomer: 1}, a.db(t, code))
}

// A raise sells at once through a proxy whose sold-out flag would have
// answered for a minute: the ledger publishes the change.
func TestRaiseClearsSoldOutFlag(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true, soldOutTTL: time.Minute})
	code := newCode(t)
	s.createVoucher(t, code, 1, 1, true)
	require.Equal(t, 201, s.reserve(t, code, 1, code+"-1").Status)
	require.Equal(t, "OUT_OF_STOCK", s.reserve(t, code, 2, code+"-2").Code())
	require.True(t, s.flagged(code))

	r := s.admin(t, "PATCH", "/admin/vouchers/"+code, map[string]any{"totalLimit": 2})
	require.Equal(t, 200, r.Status, r.Raw)
	start := time.Now()
	require.Eventually(t, func() bool { return s.reserve(t, code, 2, code+"-2").Status == 201 },
		time.Second, 10*time.Millisecond, "the raised use sells within a second")
	t.Logf("raise reached the proxy in %v", time.Since(start))
	assert.Equal(t, "OUT_OF_STOCK", s.reserve(t, code, 3, code+"-3").Code())
	assert.Equal(t, dbState{Used: 2, Active: 2, Remaining: 0, MaxPerCustomer: 1}, s.db(t, code))
}
