package main

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

// sends one new order and, while the answer is a 503 or no answer at all,
// sends the same order again after the Retry-After the proxy asked for (a
// second when there was no answer), up to retryAttempts times. They run beside
// the burst on its voucher, each order from a customer of its own (the
// burst's customers would mostly meet their limit in Redis at once), so that
// their retries meet the fault and the sell-out.
type retryingClients struct {
	url           string
	code          string
	firstCustomer int64
	client        *http.Client
	replays       atomic.Int64

	mu    sync.Mutex
	plan  Plan
	shots []Shot
}

const (
	retryAttempts   = 5
	retryClientWait = time.Second // after no answer at all
)

func newRetryingClients(proxyURL, code string, firstCustomer int64, timeout time.Duration) *retryingClients {
	rc := &retryingClients{url: reserveURL(proxyURL, code), code: code, firstCustomer: firstCustomer}
	rc.client = &http.Client{Timeout: timeout, Transport: tagTransport{&http.Transport{MaxIdleConnsPerHost: 256}, &rc.replays}}
	return rc
}

// run starts a new order every 1/rate for d and returns when every order has
// its answer or has used its attempts.
func (rc *retryingClients) run(ctx context.Context, rate float64, d time.Duration) {
	defer rc.client.CloseIdleConnections()
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / max(rate, 1)))
	defer tick.Stop()
	for end, k := time.Now().Add(d), 0; time.Now().Before(end) && ctx.Err() == nil; k++ {
		// "." never appears in the burst's orderIds (code-<base 36>).
		o := Order{ID: fmt.Sprintf("%s.r%s", rc.code, strconv.FormatInt(int64(k), 36)), Customer: rc.firstCustomer + int64(k)}
		rc.mu.Lock()
		rc.plan.Orders = append(rc.plan.Orders, o)
		idx := int32(len(rc.plan.Orders) - 1)
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

func (rc *retryingClients) order(ctx context.Context, idx int32, o Order) {
	for attempt := 0; attempt < retryAttempts && ctx.Err() == nil; attempt++ {
		s, wait := postReserve(ctx, rc.client, rc.url, o)
		rc.mu.Lock()
		rc.plan.Requests = append(rc.plan.Requests, idx)
		s.Req = int32(len(rc.plan.Requests) - 1)
		if attempt > 0 {
			rc.plan.Retries++
		}
		rc.shots = append(rc.shots, s)
		rc.mu.Unlock()
		if !s.Failed() {
			return
		}
		sleepCtx(ctx, cmp.Or(wait, retryClientWait))
	}
}

// merge appends the clients' orders, requests and answers to a burst's.
func (rc *retryingClients) merge(p Plan, shots []Shot) (Plan, []Shot) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	orders, requests := int32(len(p.Orders)), int32(len(p.Requests))
	out := Plan{Orders: slices.Concat(p.Orders, rc.plan.Orders), Retries: p.Retries + rc.plan.Retries,
		Requests: slices.Clone(p.Requests)}
	for _, o := range rc.plan.Requests {
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
