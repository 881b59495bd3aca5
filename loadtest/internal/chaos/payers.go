package chaos

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// payers are customers who go on after their 201: each reserves a new order
// on a voucher of their own, then one in four confirms it, one in four
// confirms and then refunds it, one in four releases it and one in four leaves
// it reserved. They call through shared/client as a checkout would: a call
// answered 503 or not at all is sent again after the Retry-After asked for,
// for up to payRetryWindow; the soak runs them beside its reserves.
type payers struct {
	base, code    string
	firstCustomer int64
	http          *http.Client
	client        *client.Client // the shop's client: retries 503s with the same orderId

	mu     sync.Mutex
	orders []*payOrder
	calls  map[string]int // "confirm 200", "refund 503", ... for the report
	wg     sync.WaitGroup
}

// payOrder is one payer's order and what the answers say its row must be.
type payOrder struct {
	id         string
	customer   int64
	acked      string   // the status its last answered call left it in; "" before its 201
	maybe      []string // the statuses calls that got no answer may have left it in
	unexpected string   // an answer no status allows, e.g. "confirm 409 RESERVATION_EXPIRED"
}

// payStep is one call after the reserve and the status its success leaves.
type payStep struct {
	name, status string
	send         func(ctx context.Context, c *client.Client, code string, o *payOrder) error
}

var (
	stepReserve = payStep{"reserve", "RESERVED", func(ctx context.Context, c *client.Client, code string, o *payOrder) error {
		_, err := c.Reserve(ctx, code, voucher.Claim{CustomerID: o.customer, OrderID: o.id, OrderAmount: load.OrderAmount})
		return err
	}}
	stepConfirm = payStep{"confirm", "CONFIRMED", func(ctx context.Context, c *client.Client, code string, o *payOrder) error {
		_, err := c.Confirm(ctx, code, o.id)
		return err
	}}
	stepRefund = payStep{"refund", "REFUNDED", func(ctx context.Context, c *client.Client, code string, o *payOrder) error {
		_, err := c.Refund(ctx, code, o.id)
		return err
	}}
	stepRelease = payStep{"release", "RELEASED", func(ctx context.Context, c *client.Client, code string, o *payOrder) error {
		return c.Release(ctx, code, o.id)
	}}
	// payPlans: order k follows payPlans[k%4] after its 201.
	payPlans = [][]payStep{{stepConfirm}, {stepConfirm, stepRefund}, {stepRelease}, nil}
)

// payRetryWindow bounds one call's retries (the client retries a 503 after its
// Retry-After, and no answer after a moment, with the same orderId).
const payRetryWindow = load.RetryAttempts * load.RetryClientWait

func newPayers(base, code string, firstCustomer int64) *payers {
	p := &payers{base: base, code: code, firstCustomer: firstCustomer, calls: map[string]int{},
		http: &http.Client{Timeout: probeTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	p.client = client.New(base, client.WithHTTPClient(p.http), client.WithAttemptHook(p.count))
	return p
}

// count tallies every attempt's answer for the report: "confirm 200", "refund 503", "reserve 0" (no answer).
func (p *payers) count(method, path string, status int) {
	name := "reserve"
	switch {
	case method == http.MethodDelete:
		name = "release"
	case strings.HasSuffix(path, "/confirm"):
		name = "confirm"
	case strings.HasSuffix(path, "/refund"):
		name = "refund"
	}
	p.mu.Lock()
	p.calls[fmt.Sprintf("%s %d", name, status)]++
	p.mu.Unlock()
}

// start starts a new order every 1/rate for d; wait returns once every order
// has had its calls answered or used their attempts.
func (p *payers) start(ctx context.Context, rate float64, d time.Duration) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(time.Duration(float64(time.Second) / max(rate, 1)))
		defer tick.Stop()
		for end, k := time.Now().Add(d), 0; time.Now().Before(end) && ctx.Err() == nil; k++ {
			o := &payOrder{id: fmt.Sprintf("%s.pay%s", p.code, strconv.FormatInt(int64(k), 36)), customer: p.firstCustomer + int64(k)}
			p.mu.Lock()
			p.orders = append(p.orders, o)
			p.mu.Unlock()
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				for _, step := range slices.Concat([]payStep{stepReserve}, payPlans[k%len(payPlans)]) {
					if !p.call(ctx, step, o) {
						return
					}
				}
			}()
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
}

func (p *payers) wait() {
	p.wg.Wait()
	p.http.CloseIdleConnections()
}

// call sends step for o through the client, which retries a 503 or a lost
// answer with the same orderId for up to payRetryWindow; it reports whether
// the order may go on to its next step.
func (p *payers) call(ctx context.Context, step payStep, o *payOrder) bool {
	callCtx, cancel := context.WithTimeout(ctx, payRetryWindow)
	defer cancel()
	err := step.send(callCtx, p.client, p.code, o)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch code := voucher.ErrorCode(err); {
	case err == nil:
		o.acked = step.status
		return true
	case code == "" || code == voucher.CodeUnavailable:
		// Never answered but 503 or nothing: the call may have been applied.
		o.maybe = append(o.maybe, step.status)
	default:
		o.unexpected = fmt.Sprintf("%s %d %s", step.name, httpx.Status(code), code)
	}
	return false
}

// checks judges the payers' voucher: every order's row has a status its
// answers allow, no answer was one no status allows, used_count equals the
// active rows and every customer's count its active rows.
func (p *payers) checks(ctx context.Context, b *verify.Bench) ([]verify.Check, error) {
	statuses, err := b.RedemptionStatuses(ctx, p.code)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var wrong, odd []string
	for _, o := range p.orders {
		got := statuses[o.id]
		if allowed := append([]string{o.acked}, o.maybe...); !slices.Contains(allowed, got) {
			wrong = append(wrong, fmt.Sprintf("%s is %q, answers allow %q", o.id, got, allowed))
		}
		if o.unexpected != "" {
			odd = append(odd, o.id+": "+o.unexpected)
		}
	}
	d, err := b.DBState(ctx, p.code)
	if err != nil {
		return nil, err
	}
	bad, err := b.UsageMismatches(ctx, p.code)
	if err != nil {
		return nil, err
	}
	return []verify.Check{
		verify.NewCheck("payers: every row as its answers say", len(wrong) == 0 && len(odd) == 0,
			"%d orders reserved, then confirmed, refunded, released or left (calls: %s); rows by status: %s; %d rows in a status no answer allows%s; %d answers no status allows%s",
			len(p.orders), verify.StatusList(p.calls), verify.StatusList(d.ByStatus), len(wrong), verify.Sample(wrong), len(odd), verify.Sample(odd)),
		verify.NewCheck("payers: uses counted once", d.Used == len(d.Active) && bad == 0,
			"used_count %d, RESERVED/CONFIRMED rows %d; %d customers whose voucher_customer_usage count differs from their active rows",
			d.Used, len(d.Active), bad),
	}, nil
}
