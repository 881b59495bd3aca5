package admit

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/voucher"
)

// heldChannel is the Redis channel on which each proxy names the flash orders
// its gate calls admitted, so that every other proxy knows their retries hold
// a use already (HeldElsewhere): a retry that comes through another proxy than
// its first try, as a balancer sends it, is then let through a full bound on
// requests in flight like one of that proxy's own (edge.Server.spare), instead of
// waiting for a slot like a new order. Delivery is at most once: a proxy that
// was disconnected misses some, and their retries wait for a slot as before.
// It is a hint for shedding only: what a retry is answered is decided by the
// gate script and the order's row, as for any request.
const heldChannel = "flashgate:held-orders"

// peerNote is one admitted order, on its way to the other proxies.
type peerNote struct {
	code, order string
	customer    int64
	hold        time.Duration
}

// peerMessage is what heldChannel carries: the orders of one voucher one proxy
// admitted in a moment.
type peerMessage struct {
	Proxy  string      `json:"p"` // the sender, which skips its own
	Code   string      `json:"c"`
	HoldMS int64       `json:"h"` // how long each order is remembered (its hold)
	Orders []peerOrder `json:"o"`
}

type peerOrder struct {
	Order    string `json:"o"`
	Customer int64  `json:"u"`
}

const (
	peerQueue    = 1024                   // script calls' admitted orders waiting to be published; past it they are dropped (counted)
	peerEvery    = 2 * time.Millisecond   // the orders of this long go in one message per voucher
	peerMaxBatch = 256                    // orders in one message at most
	peerTimeout  = 500 * time.Millisecond // a publish's deadline
)

// peers publishes this proxy's admitted orders on heldChannel and remembers
// those of the other proxies.
type peers struct {
	id    string
	rdb   redis.UniversalClient
	notes chan []peerNote                 // the orders one script call admitted, each
	self  string                          // how this proxy's own messages begin, skipped unread
	held  *ristretto.Cache[string, int64] // code/orderId -> customer, admitted through another proxy

	sent, received, dropped atomic.Uint64
}

func newPeers(rdb redis.UniversalClient, reg prometheus.Registerer) (*peers, error) {
	held, err := newOrderCache()
	if err != nil {
		return nil, err
	}
	id := rand.Text()
	p := &peers{id: id, rdb: rdb, notes: make(chan []peerNote, peerQueue), held: held, self: `{"p":"` + id + `"`}
	if reg != nil {
		for _, m := range []struct {
			way string
			n   *atomic.Uint64
		}{{"sent", &p.sent}, {"received", &p.received}, {"dropped", &p.dropped}} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "flashgate_peer_held_orders_total",
				Help:        "Flash orders admitted by a gate call, named to the other proxies on " + heldChannel + " (sent), learnt from them (received), or not named because the queue to Redis was full (dropped).",
				ConstLabels: prometheus.Labels{"way": m.way},
			}, func() float64 { return float64(m.n.Load()) }))
		}
	}
	return p, nil
}

// note is what the other proxies are told of cl's order, admitted here on
// code for hold.
func note(code string, cl voucher.Claim, hold time.Duration) peerNote {
	return peerNote{code: code, order: cl.OrderID, customer: cl.CustomerID, hold: hold}
}

// admitted queues the orders one script call admitted here for the other
// proxies, together: the publisher wakes once for them, not once an order. It
// never waits.
func (p *peers) admitted(notes ...peerNote) {
	if p == nil || len(notes) == 0 {
		return
	}
	select {
	case p.notes <- notes:
	default:
		p.dropped.Add(uint64(len(notes)))
	}
}

// heldElsewhere reports whether another proxy named cl's order and customer
// on code as admitted within its hold.
func (p *peers) heldElsewhere(code string, cl voucher.Claim) bool {
	if p == nil {
		return false
	}
	return holdsOrder(p.held, code, cl)
}

// run publishes the queued notes and takes the other proxies' until ctx ends.
func (p *peers) run(ctx context.Context) {
	go p.publish(ctx)
	ps := p.rdb.Subscribe(ctx, heldChannel)
	defer func() { _ = ps.Close() }()
	ch := ps.Channel(redis.WithChannelHealthCheckInterval(3 * time.Second))
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			p.take(msg.Payload)
		}
	}
}

// take remembers the orders of one message from another proxy.
func (p *peers) take(payload string) {
	if strings.HasPrefix(payload, p.self) {
		return // this proxy's own, which it knows (json.Marshal writes "p" first)
	}
	var m peerMessage
	if err := json.Unmarshal([]byte(payload), &m); err != nil || m.Proxy == p.id {
		return
	}
	if !voucher.ValidCode(m.Code) || m.HoldMS <= 0 || len(m.Orders) > peerMaxBatch {
		return
	}
	hold := time.Duration(m.HoldMS) * time.Millisecond
	for _, o := range m.Orders {
		if !voucher.ValidOrderID(o.Order) {
			continue
		}
		p.held.SetWithTTL(admittedKey(m.Code, o.Order), o.Customer, 1, hold)
		p.received.Add(1)
	}
}

// publish sends the queued notes, one message per voucher for those of
// peerEvery from the first, until ctx ends.
func (p *peers) publish(ctx context.Context) {
	pending := map[string]*peerMessage{}
	var due <-chan time.Time // the pending notes' flush; nil while none are
	flush := func() {
		due = nil
		for code, m := range pending {
			delete(pending, code)
			body, err := json.Marshal(m)
			if err != nil {
				continue
			}
			c, cancel := context.WithTimeout(ctx, peerTimeout)
			err = p.rdb.Publish(c, heldChannel, body).Err()
			cancel()
			if err != nil {
				p.dropped.Add(uint64(len(m.Orders)))
				continue
			}
			p.sent.Add(uint64(len(m.Orders)))
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ns := <-p.notes:
			for _, n := range ns {
				if due == nil {
					due = time.After(peerEvery)
				}
				m := pending[n.code]
				if m == nil || m.HoldMS != n.hold.Milliseconds() {
					if m != nil {
						flush()
						due = time.After(peerEvery)
					}
					m = &peerMessage{Proxy: p.id, Code: n.code, HoldMS: n.hold.Milliseconds()}
					pending[n.code] = m
				}
				m.Orders = append(m.Orders, peerOrder{Order: n.order, Customer: n.customer})
				if len(m.Orders) >= peerMaxBatch {
					flush()
				}
			}
		case <-due:
			flush()
		}
	}
}
