package attack

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

// hammerSizes size the hammer attack: two groups of Orders orders each, at
// Rate a second each, on a voucher of Stock uses, behind a proxy that sheds
// (MAX_INFLIGHT 8, LATENCY_SLO 0: the excess gets 503 at once).
type hammerSizes struct {
	Orders int
	Rate   float64
	Stock  int
}

var (
	hammerFull  = hammerSizes{Orders: 1600, Rate: 400, Stock: 1000}
	hammerShort = hammerFull // a shorter sale is decided by first attempts, and by their noise
)

const (
	// hammerFair is "within 10%": the hammering group's uses are at most
	// this multiple of the polite group's.
	hammerFair = 1.10
	// hammerPatience is how long after its group started sending an order
	// is sent again on a 503; then its client gives up.
	hammerPatience = 30 * time.Second
)

// group is one group of the hammer attack. Each of its orders is a client
// of its own at an address of its own (127.<net>.x.y): a crowd of customers,
// not one client behind one address that a per-client rule would judge as
// a whole.
type group struct {
	name   string
	net    int  // the second octet of its orders' addresses
	polite bool // waits the Retry-After it is given (1 s when none); else retries at once

	uses, requests, shed, noAnswer atomic.Int64
	mu                             sync.Mutex
	finals                         statusCount // each order's last answer
}

// runHammer runs group H (retries 503s at once) and group P (waits the
// Retry-After) side by side on one voucher.
func runHammer(ctx context.Context, cfg Config) (*Result, error) {
	z := hammerFull
	if cfg.Short {
		z = hammerShort
	}
	r, err := startRig(ctx, cfg, Auth{}, nil, []string{"MAX_INFLIGHT=8", "LATENCY_SLO=0"})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	code, err := r.sale(ctx, "hammer", z.Stock)
	if err != nil {
		return nil, err
	}
	url := load.ReserveURL(r.st.ProxyURL, code)
	h := &group{name: "H", net: 10, finals: statusCount{}}
	p := &group{name: "P", net: 11, polite: true, finals: statusCount{}}
	var wg sync.WaitGroup
	for i, g := range []*group{h, p} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.run(ctx, url, code, z, int64(i+1)*10_000_000)
		}()
	}
	wg.Wait()
	return judgeHammer(z, h, p), nil
}

// run places z.Orders orders at z.Rate, customers numbered from first, each
// sent until it is answered other than 503 or its patience ends.
func (g *group) run(ctx context.Context, url, code string, z hammerSizes, first int64) {
	start := time.Now()
	giveUp := start.Add(hammerPatience)
	var wg sync.WaitGroup
	for i := range z.Orders {
		load.Sleep(ctx, time.Until(start.Add(time.Duration(float64(i)/z.Rate*float64(time.Second)))))
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := clientFrom(g.ip(i), 1)
			defer client.CloseIdleConnections()
			g.order(ctx, client, url, fmt.Sprintf("%s-%s%d", code, g.name, i), first+int64(i), giveUp)
		}()
	}
	wg.Wait()
}

// ip is the address of the group's order i.
func (g *group) ip(i int) string { return fmt.Sprintf("127.%d.%d.%d", g.net, i/250, i%250+1) }

// order sends one order until it is decided: a 503 or 429 (or no answer) is
// sent again at once by the hammering group, after its Retry-After by the
// polite.
func (g *group) order(ctx context.Context, client *http.Client, url, orderID string, customer int64, giveUp time.Time) {
	body := reserveBody(orderID, customer)
	last := "gave up"
	defer func() {
		g.mu.Lock()
		g.finals[last]++
		g.mu.Unlock()
	}()
	for time.Now().Before(giveUp) && ctx.Err() == nil {
		g.requests.Add(1)
		a, err := call(ctx, client, http.MethodPost, url, "", body)
		// A 429 asks to come back later too (a limit that sheds an early
		// retry may answer it): both groups treat it as a 503.
		again := a.Status == http.StatusServiceUnavailable || a.Status == http.StatusTooManyRequests
		if err == nil && !again {
			if last = a.String(); a.Status == http.StatusCreated {
				g.uses.Add(1)
			}
			return
		}
		if err != nil {
			g.noAnswer.Add(1)
		} else {
			g.shed.Add(1)
		}
		if g.polite {
			wait, _ := strconv.Atoi(a.RetryAfter)
			load.Sleep(ctx, time.Duration(max(wait, 1))*time.Second)
		}
	}
}

// judgeHammer holds the hammering group to the polite group's share.
func judgeHammer(z hammerSizes, h, p *group) *Result {
	res := &Result{Scenario: "hammer"}
	for _, g := range []*group{h, p} {
		how := "retries 503s at once"
		if g.polite {
			how = "waits Retry-After"
		}
		res.figure("group %s (%s, from 127.%d.0.0/16): %d orders at %.0f/s: %d uses, %d requests, %d x 503 or 429, %d without an answer; last answers: %s",
			g.name, how, g.net, z.Orders, z.Rate, g.uses.Load(), g.requests.Load(), g.shed.Load(), g.noAnswer.Load(), g.finals)
	}
	hu, pu := h.uses.Load(), p.uses.Load()
	res.figure("uses H+P %d of %d", hu+pu, z.Stock)
	res.want("hammering group's uses within 10% of the polite group's", float64(hu) <= hammerFair*float64(pu),
		"H %d vs P %d (%.2fx)", hu, pu, float64(hu)/max(float64(pu), 1))
	res.want("the proxy shed (the experiment ran behind a shedding proxy)", h.shed.Load()+p.shed.Load() > 0,
		"%d answers 503 or 429", h.shed.Load()+p.shed.Load())
	res.want("never oversold", hu+pu <= int64(z.Stock), "%d uses of %d", hu+pu, z.Stock)
	return res.finish()
}
