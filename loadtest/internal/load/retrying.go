package load

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// RetryingClients are customers who do what the API asks of them: each
// sends one new order and, while the answer is a 503 or no answer at all,
// sends the same order again after the Retry-After the proxy asked for (a
// second when there was no answer), up to RetryAttempts times. They run beside
// the burst on its voucher, each order from a customer of its own (the
// burst's customers would mostly meet their limit in Redis at once), so that
// their retries meet the fault and the sell-out.
type RetryingClients struct {
	url           string
	code          string
	firstCustomer int64
	client        *http.Client
	Replays       atomic.Int64

	mu    sync.Mutex
	Plan  Plan
	shots []Shot
}

// RetryAttempts is how many times a retrying client sends one order at most;
// RetryClientWait is its wait when an attempt had no answer.
const (
	RetryAttempts   = 5
	RetryClientWait = time.Second // after no answer at all
)

// NewRetryingClients returns the retrying clients of voucher code on the proxy
// at proxyURL, their customers numbered from firstCustomer.
func NewRetryingClients(proxyURL, code string, firstCustomer int64, timeout time.Duration) *RetryingClients {
	rc := &RetryingClients{url: ReserveURL(proxyURL, code), code: code, firstCustomer: firstCustomer}
	rc.client = &http.Client{Timeout: timeout, Transport: TagTransport{&http.Transport{MaxIdleConnsPerHost: 256}, &rc.Replays}}
	return rc
}

// Run starts a new order every 1/rate for d and returns when every order has
// its answer or has used its attempts.
func (rc *RetryingClients) Run(ctx context.Context, rate float64, d time.Duration) {
	defer rc.client.CloseIdleConnections()
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / max(rate, 1)))
	defer tick.Stop()
	for end, k := time.Now().Add(d), 0; time.Now().Before(end) && ctx.Err() == nil; k++ {
		// "." never appears in the burst's orderIds (code-<base 36>).
		o := Order{ID: fmt.Sprintf("%s.r%s", rc.code, strconv.FormatInt(int64(k), 36)), Customer: rc.firstCustomer + int64(k)}
		rc.mu.Lock()
		rc.Plan.Orders = append(rc.Plan.Orders, o)
		idx := int32(len(rc.Plan.Orders) - 1)
		rc.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc.order(ctx, idx, o)
		}()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
}

func (rc *RetryingClients) order(ctx context.Context, idx int32, o Order) {
	for attempt := 0; attempt < RetryAttempts && ctx.Err() == nil; attempt++ {
		s, wait := PostReserve(ctx, rc.client, rc.url, o)
		rc.mu.Lock()
		rc.Plan.Requests = append(rc.Plan.Requests, idx)
		s.Req = int32(len(rc.Plan.Requests) - 1)
		if attempt > 0 {
			rc.Plan.Retries++
		}
		rc.shots = append(rc.shots, s)
		rc.mu.Unlock()
		if !s.Failed() {
			return
		}
		Sleep(ctx, cmp.Or(wait, RetryClientWait))
	}
}

// Merge appends the clients' orders, requests and answers to a burst's.
func (rc *RetryingClients) Merge(p Plan, shots []Shot) (Plan, []Shot) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	orders, requests := int32(len(p.Orders)), int32(len(p.Requests))
	out := Plan{Orders: slices.Concat(p.Orders, rc.Plan.Orders), Retries: p.Retries + rc.Plan.Retries,
		Requests: slices.Clone(p.Requests)}
	for _, o := range rc.Plan.Requests {
		out.Requests = append(out.Requests, o+orders)
	}
	all := slices.Clone(shots)
	for _, s := range rc.shots {
		if s.Req >= 0 {
			s.Req += requests
		}
		all = append(all, s)
	}
	return out, all
}
