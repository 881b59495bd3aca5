package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/flashgate/flashgate/shared/httpx"
)

// payers are customers who go on after their 201: each reserves a new order
// on a voucher of their own, then one in four confirms it, one in four
// confirms and then refunds it, one in four releases it and one in four leaves
// it reserved. A call answered 503 or not at all is sent again after the
// Retry-After asked for (a second when there was no answer), up to
// retryAttempts times; the soak runs them beside its reserves.
type payers struct {
	base, code    string
	firstCustomer int64
	client        *http.Client

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
	name, method, suffix string
	want                 int
	status               string
}

var (
	stepReserve = payStep{"reserve", http.MethodPost, "", http.StatusCreated, "RESERVED"}
	stepConfirm = payStep{"confirm", http.MethodPost, "/confirm", http.StatusOK, "CONFIRMED"}
	stepRefund  = payStep{"refund", http.MethodPost, "/refund", http.StatusOK, "REFUNDED"}
	stepRelease = payStep{"release", http.MethodDelete, "", http.StatusNoContent, "RELEASED"}
	// payPlans: order k follows payPlans[k%4] after its 201.
	payPlans = [][]payStep{{stepConfirm}, {stepConfirm, stepRefund}, {stepRelease}, nil}
)

func newPayers(base, code string, firstCustomer int64) *payers {
	return &payers{base: base, code: code, firstCustomer: firstCustomer, calls: map[string]int{},
		client: &http.Client{Timeout: probeTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
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
	p.client.CloseIdleConnections()
}

// call sends step for o until it is answered; it reports whether the order
// may go on to its next step.
func (p *payers) call(ctx context.Context, step payStep, o *payOrder) bool {
	for attempt := 0; attempt < retryAttempts && ctx.Err() == nil; attempt++ {
		status, code, wait := p.send(ctx, step, o)
		p.mu.Lock()
		p.calls[fmt.Sprintf("%s %d", step.name, status)]++
		switch {
		case status == step.want:
			o.acked = step.status
		case status != 0 && status != http.StatusServiceUnavailable:
			o.unexpected = fmt.Sprintf("%s %d %s", step.name, status, code)
		}
		p.mu.Unlock()
		if status == step.want {
			return true
		}
		if status != 0 && status != http.StatusServiceUnavailable {
			return false
		}
		sleepCtx(ctx, cmp.Or(wait, retryClientWait))
	}
	p.mu.Lock()
	o.maybe = append(o.maybe, step.status)
	p.mu.Unlock()
	return false
}

// send sends one call and returns its status (0: no answer), the error code
// of its body and the Retry-After of a 503.
func (p *payers) send(ctx context.Context, step payStep, o *payOrder) (int, string, time.Duration) {
	url, body := p.base+httpx.ReservationPath(p.code, o.id)+step.suffix, []byte(nil)
	if step == stepReserve {
		url, body = reserveURL(p.base, p.code), reserveBody(Order{ID: o.id, Customer: o.customer}, orderAmount)
	}
	req, err := http.NewRequestWithContext(ctx, step.method, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, "", 0
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if err != nil {
		return 0, "", 0
	}
	var wait time.Duration
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
		wait = time.Duration(n) * time.Second
	}
	return resp.StatusCode, jsonString(raw, "error"), wait
}

// checks judges the payers' voucher: every order's row has a status its
// answers allow, no answer was one no status allows, used_count equals the
// active rows and every customer's count its active rows.
func (p *payers) checks(ctx context.Context, b *Bench) ([]Check, error) {
	rows, err := b.db.Query(ctx, `SELECT order_id, status FROM voucher_redemption WHERE voucher_code = $1`, p.code)
	if err != nil {
		return nil, fmt.Errorf("read redemptions of %s: %w", p.code, err)
	}
	statuses := map[string]string{}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			rows.Close()
			return nil, err
		}
		statuses[id] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
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
	bad, err := usageMismatches(ctx, b, p.code)
	if err != nil {
		return nil, err
	}
	return []Check{
		check("payers: every row as its answers say", len(wrong) == 0 && len(odd) == 0,
			"%d orders reserved, then confirmed, refunded, released or left (calls: %s); rows by status: %s; %d rows in a status no answer allows%s; %d answers no status allows%s",
			len(p.orders), statusList(p.calls), statusList(d.ByStatus), len(wrong), sample(wrong), len(odd), sample(odd)),
		check("payers: uses counted once", d.Used == len(d.Active) && bad == 0,
			"used_count %d, RESERVED/CONFIRMED rows %d; %d customers whose voucher_customer_usage count differs from their active rows",
			d.Used, len(d.Active), bad),
	}, nil
}
