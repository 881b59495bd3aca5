package attack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/checkout"
)

// The attacks on who pays for a request: a request in a customer's name
// without its checkout token (notoken), retries of an admitted order
// (retries), a stranger sending the victim's orderId (stranger).

// chargeSecret is the proxy's CHECKOUT_TOKEN_SECRET in notoken.
const chargeSecret = "attack-checkout-secret-0123456789"

// runNoToken sends 50 reserves in customer 42's name without a checkout
// token on a voucher that requires one, at CUSTOMER_RATE=1, then 42's own
// with a valid token; and 20 reserves for made-up codes.
func runNoToken(ctx context.Context, cfg Config) (*Result, error) {
	r, err := startRig(ctx, cfg, Auth{}, nil, []string{"CUSTOMER_RATE=1", "CHECKOUT_TOKEN_SECRET=k1:" + chargeSecret})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	code, err := r.sale(ctx, "notoken", 100)
	if err != nil {
		return nil, err
	}
	client := clientFrom("", 4)
	patch := []byte(`{"requireCheckoutToken":true}`)
	if a, err := call(ctx, client, http.MethodPatch, r.st.LedgerURL+"/admin/vouchers/"+code, adminToken, patch); err != nil || a.Status != http.StatusOK {
		return nil, fmt.Errorf("PATCH requireCheckoutToken: %v %v", a, err)
	}
	url := load.ReserveURL(r.st.ProxyURL, code)
	// Until the proxy knows the voucher requires a token (another customer).
	for i := 0; ; i++ {
		a, err := call(ctx, client, http.MethodPost, url, "", reserveBody(fmt.Sprintf("%s-probe-%d", code, i), 99))
		if err == nil && a.Status == http.StatusForbidden {
			break
		}
		if i > 100 {
			return nil, fmt.Errorf("the proxy never required the token: %v %v", a, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	bot := statusCount{}
	for i := range 50 {
		a, err := call(ctx, client, http.MethodPost, url, "", reserveBody(fmt.Sprintf("%s-bot-%d", code, i), 42))
		if err != nil {
			return nil, err
		}
		bot[a.String()]++
	}
	token := checkout.Mint(checkout.Key{ID: "k1", Secret: []byte(chargeSecret)}, code, 42, time.Now().Add(time.Minute))
	real, err := reserveWithCheckout(ctx, client, url, code+"-real", 42, token)
	if err != nil {
		return nil, err
	}
	keys, junk, err := junkCodeKeys(ctx, r, client)
	if err != nil {
		return nil, err
	}
	res := &Result{Scenario: "notoken"}
	res.figure("50 reserves in customer 42's name without a checkout token: %v; then 42 with a valid token: %v", bot, real)
	res.figure("20 reserves for made-up codes: %v; Redis keys rate:flashgate:{NOPE...}: %d", junk, keys)
	res.want("the real customer buys after 50 no-token reserves in their name", real.Status == http.StatusCreated, "%v", real)
	res.want("made-up codes make no Redis key", keys == 0, "%d keys", keys)
	return res.finish(), nil
}

// reserveWithCheckout sends one reserve with an X-Checkout-Token.
func reserveWithCheckout(ctx context.Context, client *http.Client, url, order string, customer int64, token string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(reserveBody(order, customer))))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderCheckoutToken, token)
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	resp.Body.Close()
	return answer{Status: resp.StatusCode}, nil
}

// junkCodeKeys sends 20 reserves for made-up codes and counts the Redis
// keys they left.
func junkCodeKeys(ctx context.Context, r *rig, client *http.Client) (int, statusCount, error) {
	prefix := fmt.Sprintf("NOPE%d", time.Now().UnixNano()%1_000_000)
	got := statusCount{}
	for i := range 20 {
		code := fmt.Sprintf("%s%d", prefix, i)
		a, err := call(ctx, client, http.MethodPost, load.ReserveURL(r.st.ProxyURL, code), "", reserveBody(code+"-o", int64(i+1)))
		if err != nil {
			return 0, nil, err
		}
		got[a.String()]++
	}
	opt, err := redis.ParseURL(r.st.RedisURL)
	if err != nil {
		return 0, nil, err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "*{"+prefix+"*").Result()
	return len(keys), got, err
}

// retriesAt is CLIENT_RATE in retries.
const retriesAt = 5

// runRetries sends 300 retries of one order the proxy answered 201 at
// CLIENT_RATE=5 and counts the ledger's reservation calls they made.
func runRetries(ctx context.Context, cfg Config) (*Result, error) {
	r, err := startRig(ctx, cfg, Auth{}, nil, []string{fmt.Sprintf("CLIENT_RATE=%d", retriesAt)})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	code, err := r.sale(ctx, "retries", 10)
	if err != nil {
		return nil, err
	}
	client := clientFrom("", 16)
	url, body := load.ReserveURL(r.st.ProxyURL, code), reserveBody(code+"-o1", 1)
	if err := firstOrder(ctx, client, url, body); err != nil {
		return nil, err
	}
	before, err := r.ledgerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	got := statusCount{}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 16 {
		wg.Go(func() {
			for next.Add(1) <= 300 {
				a, err := call(ctx, client, http.MethodPost, url, "", body)
				k := a.String()
				if err != nil {
					k = "error"
				}
				mu.Lock()
				got[k]++
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	after, err := r.ledgerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	reservations := func(labels string) bool { return strings.Contains(labels, "reservations") }
	calls := metricSumFunc(after, httpRequests, reservations) - metricSumFunc(before, httpRequests, reservations)
	res := &Result{Scenario: "retries"}
	res.figure("300 retries of one order answered 201, 16 at a time, in %v at CLIENT_RATE=%d: %v; ledger reservation calls: %.0f",
		took.Round(time.Millisecond), retriesAt, got, calls)
	res.want("300 retries reach the ledger at most a few dozen times", calls <= 36, "%.0f calls", calls)
	res.want("retries are charged to the client's budget", got["429 RATE_LIMITED"] > 0, "%v", got)
	return res.finish(), nil
}

// firstOrder sends the order until it is answered 201, a second apart while
// it is refused 429 or 503.
func firstOrder(ctx context.Context, client *http.Client, url string, body []byte) error {
	for range 10 {
		a, err := call(ctx, client, http.MethodPost, url, "", body)
		if err != nil || a.Status == http.StatusCreated {
			return err
		}
		if a.Status != http.StatusTooManyRequests && a.Status != http.StatusServiceUnavailable {
			return fmt.Errorf("the order: %v", a)
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("the order was never answered 201")
}

// runStranger: a stranger, refused at CUSTOMER_RATE=1, sends the victim's
// orderId under its own customer; then the victim's first attempt.
func runStranger(ctx context.Context, cfg Config) (*Result, error) {
	r, err := startRig(ctx, cfg, Auth{}, nil, []string{"CUSTOMER_RATE=1"})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	code, err := r.sale(ctx, "stranger", 10)
	if err != nil {
		return nil, err
	}
	client := clientFrom("", 2)
	url, victimOrder := load.ReserveURL(r.st.ProxyURL, code), code+"-victim"
	own, err := call(ctx, client, http.MethodPost, url, "", reserveBody(code+"-stranger", 666))
	if err != nil {
		return nil, err
	}
	stolen, err := call(ctx, client, http.MethodPost, url, "", reserveBody(victimOrder, 666))
	if err != nil {
		return nil, err
	}
	victim, err := call(ctx, client, http.MethodPost, url, "", reserveBody(victimOrder, 7))
	if err != nil {
		return nil, err
	}
	res := &Result{Scenario: "stranger"}
	res.figure("the stranger's own order: %v; the victim's orderId under the stranger's customer: %v (Retry-After %s); the victim's first attempt: %v",
		own, stolen, stolen.RetryAfter, victim)
	res.want("the stranger was refused with the victim's orderId", stolen.Status == http.StatusTooManyRequests, "%v", stolen)
	res.want("the victim's first attempt is a 201", victim.Status == http.StatusCreated, "%v", victim)
	return res.finish(), nil
}
