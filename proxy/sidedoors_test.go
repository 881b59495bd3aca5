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

	"github.com/flashgate/flashgate/proxy/internal/limits"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/checkout"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestHostileNoTokenSpendsNoCustomerBudget: with CUSTOMER_RATE=1 on a voucher
// that requires a checkout token, 50 reserves in customer 42's name without
// a token (each 403 CHECKOUT_TOKEN_REQUIRED) spend none of 42's bucket: 42,
// with a valid token, buys at once. 20 reserves for made-up codes (404) make
// no Redis key.
func TestHostileNoTokenSpendsNoCustomerBudget(t *testing.T) {
	t.Parallel()
	keys, err := checkout.ParseKeys("k2:" + currentSecret)
	require.NoError(t, err)
	s := newStack(t, stackOptions{coalesce: true, checkoutKeys: keys,
		limits: &limits.Config{CustomerRate: 1, EarlyRetries: true, RedisTimeout: time.Second}})
	code := newCode(t)
	body := voucherBody(code, 100, 1, true)
	body["requireCheckoutToken"] = true
	s.create(t, body)

	for i := range 50 {
		st, e := s.reserveOnce(t, code, 42, fmt.Sprintf("%s-bot-%d", code, i), "")
		require.Equal(t, http.StatusForbidden, st, "a reserve without a token: %s", e)
	}
	st, e := s.reserveOnce(t, code, 42, code+"-real", keys.Mint(code, 42, time.Now().Add(time.Minute)))
	assert.Equal(t, http.StatusCreated, st, "the real customer after 50 no-token reserves in their name: %s", e)

	prefix := "NOPE" + code[:8]
	for i := range 20 {
		st, _ := s.reserveOnce(t, fmt.Sprintf("%s%d", prefix, i), int64(i+1), fmt.Sprintf("%s-nope-%d", code, i), "")
		require.Equal(t, http.StatusNotFound, st)
	}
	made, err := s.rdb.Keys(context.Background(), "rate:flashgate:{"+prefix+"*").Result()
	require.NoError(t, err)
	assert.Empty(t, made, "Redis keys made by reserves for unknown codes")
}

// TestRetryOfAdmittedOrderChargedAndReplayed: at CLIENT_RATE=5, 300 retries
// of one order this proxy answered 201 are charged to the client's bucket
// (most 429) and those let through are answered 201 by the ledger from the
// order's row, marked replayed: the ledger sees a few dozen calls at most,
// not 300. A retry
// of the order with another amount is not taken for it: the ledger answers
// ORDER_CONFLICT.
func TestRetryOfAdmittedOrderChargedAndReplayed(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true, tap: true,
		limits: &limits.Config{ClientRate: 5, EarlyRetries: true, RedisTimeout: time.Second}})
	code := newCode(t)
	s.createVoucher(t, code, 10, 1, true)
	order := code + "-o1"
	require.Equal(t, http.StatusCreated, s.reserve(t, code, 7, order).Status)
	before := s.tap.calls.Load()

	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for range 300 {
		wg.Go(func() {
			r := s.reserve(t, code, 7, order)
			mu.Lock()
			got[r.Status]++
			mu.Unlock()
			if r.Status == http.StatusCreated && r.Header.Get(api.HeaderReplayed) != "true" {
				t.Errorf("a retry's 201 without %s", api.HeaderReplayed)
			}
		})
	}
	wg.Wait()
	calls := s.tap.calls.Load() - before
	t.Logf("300 retries: %v; ledger calls %d", got, calls)
	assert.Equal(t, 300, got[http.StatusCreated]+got[http.StatusTooManyRequests], "201 or 429 only: %v", got)
	assert.Greater(t, got[http.StatusTooManyRequests], 250, "the client's bucket held the retries")
	assert.LessOrEqual(t, calls, int64(30), "ledger calls made by 300 retries")

	time.Sleep(4 * time.Second) // the bucket full again, the early-retry memory passed
	r := s.reserveAmount(t, code, 7, order, 6_000)
	assert.Equal(t, http.StatusConflict, r.Status, "the order retried with another amount: %s", r.Raw)
	assert.Equal(t, voucher.CodeOrderConflict, r.Body["error"], r.Raw)
	assert.Equal(t, 1, s.db(t, code).Used)
}

// TestRetryMemoryKeyedByCustomer: a stranger sending the victim's orderId
// under its own customer, and refused (429 over CUSTOMER_RATE), does not
// make the victim's first attempt of that order early: it is a 201.
func TestRetryMemoryKeyedByCustomer(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true,
		limits: &limits.Config{CustomerRate: 1, EarlyRetries: true, RedisTimeout: time.Second}})
	code := newCode(t)
	s.createVoucher(t, code, 10, 1, true)
	victimOrder := code + "-victim"
	require.Equal(t, http.StatusCreated, s.reserve(t, code, 666, code+"-stranger").Status)
	r := s.reserve(t, code, 666, victimOrder)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "the stranger over its rate: %s", r.Raw)
	r = s.reserve(t, code, 7, victimOrder)
	assert.Equal(t, http.StatusCreated, r.Status, "the victim's first attempt: %s (Retry-After %s)", r.Raw, r.Header.Get("Retry-After"))
}

// TestClientRefusedOnlyWhileBucketEmpty: at CLIENT_RATE=20, one bot's burst
// of 21 at once from a NAT's address empties its bucket (the 21st gets 429),
// and a legitimate stream of 10 a second from the same address is served
// as soon as a token is back, within 1.5 s of the burst, not locked out for
// the bot's Retry-After.
func TestClientRefusedOnlyWhileBucketEmpty(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true,
		limits: &limits.Config{ClientRate: 20, EarlyRetries: true, RedisTimeout: time.Second}})
	code := newCode(t)
	s.createVoucher(t, code, 1_000, 1, true)
	nat := fromAddr("127.0.0.5")
	var wg sync.WaitGroup
	var tally statusTally
	for i := range 21 {
		wg.Go(func() {
			tally.add(send(nat, s.ProxyURL, code, int64(1_000+i), fmt.Sprintf("%s-bot-%d", code, i)).status)
		})
	}
	wg.Wait()
	burst := time.Now()
	require.Equal(t, 1, tally.get(http.StatusTooManyRequests), "the burst's last: %v", tally.n)

	var served time.Duration
	for i := 0; time.Since(burst) < 5*time.Second; i++ {
		if a := send(nat, s.ProxyURL, code, int64(1+i), fmt.Sprintf("%s-real-%d", code, i)); a.status == http.StatusCreated {
			served = time.Since(burst)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the NAT's legitimate stream first served %v after the burst", served)
	assert.NotZero(t, served, "the legitimate stream never served within 5 s")
	assert.Less(t, served, 1500*time.Millisecond, "the legitimate stream served within 1.5 s of the burst")
}

// TestClientLimitOnOrderRoutes: the edge's order routes (get, confirm,
// release, refund) answer a code outside the set 404 without asking the
// ledger, and charge the client key's bucket (CLIENT_RATE) before the
// ledger (LIVE_CODES_REFRESH long: the set is not read again meanwhile).
func TestClientLimitOnOrderRoutes(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{coalesce: true, tap: true, codesRefresh: time.Hour,
		limits: &limits.Config{ClientRate: 5, RedisTimeout: time.Second}})
	code := newCode(t)
	s.createVoucher(t, code, 10, 1, true)
	time.Sleep(time.Second) // the bucket full again after the create's lookups
	before := s.tap.calls.Load()
	for i, m := range []struct{ method, suffix string }{{"GET", ""}, {"POST", "/confirm"}, {"DELETE", ""}, {"POST", "/refund"}} {
		r := call(t, m.method, s.ProxyURL+api.ReservationsPath("NOPE"+code[:8])+fmt.Sprintf("/o%d", i)+m.suffix, "", nil)
		assert.Equal(t, http.StatusNotFound, r.Status, "%s %s on an unknown code: %s", m.method, m.suffix, r.Raw)
	}
	assert.Zero(t, s.tap.calls.Load()-before, "ledger calls for unknown codes' order routes")

	got := map[int]int{}
	for i := range 20 {
		got[call(t, "GET", s.ProxyURL+api.ReservationsPath(code)+fmt.Sprintf("/o%d", i), "", nil).Status]++
	}
	t.Logf("20 GETs at CLIENT_RATE=5: %v", got)
	assert.GreaterOrEqual(t, got[http.StatusTooManyRequests], 10, "GETs over the client's rate: %v", got)
}
