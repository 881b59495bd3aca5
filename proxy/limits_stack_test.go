package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/proxy/internal/limits"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// fromAddr returns an HTTP client whose connections leave from ip (any of
// 127.0.0.0/8 on loopback): a test's clients at different addresses.
func fromAddr(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 256}}
}

// reserveAnswer is a reserve's status and Retry-After (0 when none).
type reserveAnswer struct {
	status     int
	retryAfter time.Duration
}

// send posts a reserve of 5,000 from h; a failed exchange is status 0.
func send(h *http.Client, base, code string, customer int64, order string) reserveAnswer {
	body, _ := json.Marshal(map[string]any{"customerId": customer, "orderId": order, "orderAmount": 5_000})
	resp, err := h.Post(base+api.ReservationsPath(code), "application/json", bytes.NewReader(body))
	if err != nil {
		return reserveAnswer{}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	ra, _ := httpx.RetryAfterOf(resp.Header)
	return reserveAnswer{status: resp.StatusCode, retryAfter: ra}
}

// statusTally counts answers by status, safely from many goroutines.
type statusTally struct {
	mu sync.Mutex
	n  map[int]int
}

func (t *statusTally) add(status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[int]int{}
	}
	t.n[status]++
}

func (t *statusTally) get(status int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[status]
}

// TestClientRateHoldsABot: with CLIENT_RATE=20 CLIENT_BURST=20, a bot at one
// address (127.0.0.2) sending as fast as 16 connections go, each reserve with
// another made-up customerId (10,000 of them), gets at most its share of a
// 1,000-use sale (the burst and 20 a second) while 40 real customers, each
// at its own address, all buy during its run. Every other reserveAnswer the bot gets
// is 429 RATE_LIMITED with a Retry-After, and the uses taken are exactly the
// 201s answered. With early retries refused (the default), the bot, which
// never waits, gets no more than the burst and what refilled while its first
// refusals were being answered.
func TestClientRateHoldsABot(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(fmt.Sprintf("early_retries_refused=%v", early), func(t *testing.T) {
			s := newStack(t, stackOptions{coalesce: true,
				limits: &limits.Config{ClientRate: 20, ClientBurst: 20, EarlyRetries: early, RedisTimeout: time.Second}})
			code := newCode(t)
			s.createVoucher(t, code, 1_000, 1, true)

			const run, bots, customers = 2 * time.Second, 16, 40
			bot := fromAddr("127.0.0.2")
			var botAnswers statusTally
			var sent atomic.Int64
			start := time.Now()
			var wg sync.WaitGroup
			for g := range bots {
				wg.Go(func() {
					for i := 0; time.Since(start) < run; i++ {
						n := sent.Add(1)
						a := send(bot, s.ProxyURL, code, 1_000_000+n%10_000, fmt.Sprintf("%s-bot-%d-%d", code, g, i))
						botAnswers.add(a.status)
						if a.status == http.StatusTooManyRequests && a.retryAfter < time.Second {
							t.Errorf("429 with Retry-After %v, want at least 1s", a.retryAfter)
						}
					}
				})
			}
			var real statusTally
			for i := range customers {
				wg.Go(func() {
					time.Sleep(run / 4 * time.Duration(i) / customers * 3) // spread over the bot's run
					a := send(fromAddr(fmt.Sprintf("127.0.0.%d", 10+i)), s.ProxyURL, code, int64(1+i), fmt.Sprintf("%s-real-%d", code, i))
					real.add(a.status)
				})
			}
			wg.Wait()
			elapsed := time.Since(start)

			got := botAnswers.get(http.StatusCreated)
			share := 20 + int(20*elapsed.Seconds()) + 1
			t.Logf("bot: %d reserves in %v: %d x 201, %d x 429; real customers: %v; share at most %d",
				sent.Load(), elapsed.Round(time.Millisecond), got, botAnswers.get(http.StatusTooManyRequests), real.n, share)
			assert.Equal(t, customers, real.get(http.StatusCreated), "every real customer bought: %v", real.n)
			assert.GreaterOrEqual(t, got, 20, "the bot's burst")
			assert.LessOrEqual(t, got, share, "the bot's share")
			// 409: a made-up customer the bot used again after 10,000 sends,
			// already holding its use (ALREADY_USED): decided, no use taken.
			assert.Equal(t, int(sent.Load()), got+botAnswers.get(http.StatusTooManyRequests)+botAnswers.get(http.StatusConflict),
				"the bot got 201, 429 or 409 only: %v", botAnswers.n)
			refused := s.metric(t, "flashgate_rate_limited_total", "cause", "client") + s.metric(t, "flashgate_rate_limited_total", "cause", "early_client")
			assert.Equal(t, float64(botAnswers.get(http.StatusTooManyRequests)), refused, "each 429 counted by its cause")
			if !early {
				assert.Zero(t, s.metric(t, "flashgate_rate_limited_total", "cause", "early_client"))
			}
			assert.Equal(t, got+customers, s.db(t, code).Used, "the uses taken are the 201s answered")
		})
	}
}

// TestCustomerRateAcrossProxies: CUSTOMER_RATE holds across proxies (its
// bucket is in Redis): one customer's reserves on one voucher, sent through
// two proxies in turn, get the burst (3) and then 429 RATE_LIMITED; another
// customer, or the same customer on another voucher, is not held back. An
// order refused sent again at once is refused as early (without taking a
// token, and told more than the second it was first told). A retry of an
// order answered 201 takes a token like any other request: refused while the
// bucket is empty, it gets its 201 once a token is back.
func TestCustomerRateAcrossProxies(t *testing.T) {
	lim := &limits.Config{CustomerRate: 1, CustomerBurst: 3, EarlyRetries: true, RedisTimeout: time.Second}
	redisURL := devstacktest.RedisURL(t)
	s := newStack(t, stackOptions{coalesce: true, redisURL: redisURL, limits: lim})
	other := startProxy(t, stackOptions{coalesce: true, redisURL: redisURL, limits: lim}, s.LedgerURL)
	code, code2 := newCode(t), newCode(t)
	s.createVoucher(t, code, 100, 10, true)
	s.createVoucher(t, code2, 100, 10, true)

	h := fromAddr("127.0.0.1")
	proxies := []string{s.ProxyURL, other.ProxyURL}
	start := time.Now()
	var statuses []int
	for i := range 6 {
		statuses = append(statuses, send(h, proxies[i%2], code, 7, fmt.Sprintf("%s-o%d", code, i)).status)
	}
	elapsed := time.Since(start)
	require.Less(t, elapsed, time.Second, "sent within one token's time (1/s)")
	assert.Equal(t, []int{201, 201, 201, 429, 429, 429}, statuses)
	assert.Equal(t, 201, send(h, s.ProxyURL, code, 8, code+"-c8").status, "another customer")
	assert.Equal(t, 201, send(h, other.ProxyURL, code2, 7, code2+"-c7").status, "another voucher")

	again := send(h, proxies[1], code, 7, code+"-o5")
	assert.Equal(t, http.StatusTooManyRequests, again.status)
	assert.GreaterOrEqual(t, again.retryAfter, time.Second)
	assert.Equal(t, 1.0, other.metric(t, "flashgate_rate_limited_total", "cause", "early_order"), "refused as early")
	customer := s.metric(t, "flashgate_rate_limited_total", "cause", "customer") + other.metric(t, "flashgate_rate_limited_total", "cause", "customer")
	assert.Equal(t, 3.0, customer, "the three over the rate, counted as such")
	assert.Equal(t, http.StatusTooManyRequests, send(h, s.ProxyURL, code, 7, code+"-o0").status,
		"a retry of an order answered 201 here, the customer's bucket empty")
	require.Eventually(t, func() bool { return send(h, s.ProxyURL, code, 7, code+"-o0").status == http.StatusCreated },
		20*time.Second, time.Second, "the retry's 201 once a token is back")
	assert.Equal(t, 4, s.db(t, code).Used, "customers 7 (three) and 8")
}

// slowRedis is a Redis hook that makes every command of the proxy take d
// longer: a proxy whose capacity is known, so that a burst is shed.
type slowRedis struct{ d time.Duration }

func (h slowRedis) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(h.d)
		return next(ctx, cmd)
	}
}

func (h slowRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hammerResult is what a group of the two-group experiment got.
type hammerResult struct {
	created, sent, first int64 // first: uses won at an order's first attempt
}

// TestHammeringRetriesGetNoMore is the two-group experiment, shortened: two
// groups of 600 orders, each sent at 300 a second from its own address, on a
// 300-use voucher behind a proxy that sheds at once past MAX_INFLIGHT=2,
// each reserve its own script call made 5 ms slower (some 300 a second: most
// first attempts are shed, and retries decide the sale). The
// hammering group (127.0.0.2) sends a 503's or 429's order again at once (10
// ms later); the polite one (127.0.0.3) waits the Retry-After it was given.
// With early retries refused, the hammering group gets no more than the
// polite one's uses and 10%; without (measured for comparison, not judged),
// what hammering bought. Every order ends answered, and the uses taken are
// exactly the 201s.
func TestHammeringRetriesGetNoMore(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(fmt.Sprintf("early_retries_refused=%v", early), func(t *testing.T) {
			s := newStack(t, stackOptions{maxInflight: 2, redisHook: slowRedis{5 * time.Millisecond},
				limits: &limits.Config{EarlyRetries: early, RedisTimeout: time.Second}})
			code := newCode(t)
			const uses, orders, perSecond = 300, 600, 300
			s.createVoucher(t, code, uses, 1, true)

			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			groups := []struct {
				name, addr string
				wait       func(reserveAnswer) time.Duration
			}{
				{"hammering", "127.0.0.2", func(reserveAnswer) time.Duration { return 10 * time.Millisecond }},
				{"polite", "127.0.0.3", func(a reserveAnswer) time.Duration { return a.retryAfter }},
			}
			results := make([]hammerResult, len(groups))
			var wg sync.WaitGroup
			start := time.Now()
			for gi, g := range groups {
				h := fromAddr(g.addr)
				for i := range orders {
					wg.Go(func() {
						time.Sleep(time.Until(start.Add(time.Second * time.Duration(i) / perSecond)))
						customer := int64(1 + gi*orders + i)
						order := fmt.Sprintf("%s-%s-%d", code, g.name, i)
						for attempt := 1; ctx.Err() == nil; attempt++ {
							a := send(h, s.ProxyURL, code, customer, order)
							atomic.AddInt64(&results[gi].sent, 1)
							if a.status == http.StatusCreated {
								atomic.AddInt64(&results[gi].created, 1)
								if attempt == 1 {
									atomic.AddInt64(&results[gi].first, 1)
								}
								return
							}
							if a.status != 0 && a.status != http.StatusServiceUnavailable && a.status != http.StatusTooManyRequests {
								return // decided: OUT_OF_STOCK
							}
							select {
							case <-ctx.Done():
							case <-time.After(g.wait(a)):
							}
						}
						t.Errorf("%s order %s never answered", g.name, order)
					})
				}
			}
			wg.Wait()
			hammer, polite := results[0], results[1]
			t.Logf("early retries refused %v: hammering %d uses (%d at a first attempt) in %d requests, polite %d uses (%d) in %d requests (%v); refused early: %v",
				early, hammer.created, hammer.first, hammer.sent, polite.created, polite.first, polite.sent, time.Since(start).Round(time.Millisecond),
				s.metric(t, "flashgate_rate_limited_total", "cause", "early_order"))
			assert.Equal(t, int64(uses), hammer.created+polite.created, "sold out, one use per 201")
			assert.Equal(t, uses, s.db(t, code).Used)
			if early {
				assert.LessOrEqual(t, float64(hammer.created), 1.1*float64(polite.created), "the hammering group's share")
			}
		})
	}
}

var _ = voucher.CodeRateLimited
