package admit

import (
	"context"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/voucher"
)

// admittedTTL is how long an order answered 201 is remembered for
// AdmittedHere: the ledger's hold (its RESERVATION_TTL, 15 minutes by
// default, or the voucher's holdTtl, admittedFor), after which the order is
// expired and its retry is a new request like any other. The proxy does not
// know RESERVATION_TTL: remembering longer than the hold only spares a retry
// that is then answered from its row.
const admittedTTL = 15 * time.Minute

// admittedFor is how long an order of v answered 201 is remembered: the
// voucher's holdTtl when it has one (as its terms were when the order was
// admitted; a later PATCH moves only later reservations), else admittedTTL.
func admittedFor(v voucher.Voucher) time.Duration { return v.Hold(admittedTTL) }

// admittedMax bounds the orders remembered (one unit each): past it ristretto
// evicts, and an evicted order's retry is only shed like a new one.
const admittedMax = 200_000

// newOrderCache returns a cache of orders (admittedKey) to their customer, of
// admittedMax orders: those answered 201 here (AdmittedHere), and those
// another proxy named (HeldElsewhere).
func newOrderCache() (*ristretto.Cache[string, int64], error) {
	return ristretto.NewCache(&ristretto.Config[string, int64]{
		NumCounters: 10 * admittedMax, MaxCost: admittedMax, BufferItems: 64,
	})
}

// holdsOrder reports whether orders remembers cl's order on code for cl's
// customer.
func holdsOrder(orders *ristretto.Cache[string, int64], code string, cl voucher.Claim) bool {
	customer, ok := orders.Get(admittedKey(code, cl.OrderID))
	return ok && customer == cl.CustomerID
}

// admittedOrder is what this proxy remembers of an order it answered 201:
// whose it is and for how much (a retry of another amount is no retry of it).
type admittedOrder struct {
	customer, amount int64
}

// newAdmittedCache returns the cache of the orders answered 201 here, of
// admittedMax orders.
func newAdmittedCache() (*ristretto.Cache[string, admittedOrder], error) {
	return ristretto.NewCache(&ristretto.Config[string, admittedOrder]{
		NumCounters: 10 * admittedMax, MaxCost: admittedMax, BufferItems: 64,
	})
}

// AdmittedHere reports whether this proxy answered 201 to cl's order,
// customer and order amount on flash voucher code within a reservation's
// hold (another amount is the ledger's ORDER_CONFLICT to answer): a retry of an
// admitted order, which takes no new use and is answered from its row, so a
// full bound on requests in flight (MAX_INFLIGHT) lets it in. It asks
// nothing of Redis: the bound is full when the proxy is at its limit, and a
// Redis call for every request it sheds would make shedding cost what
// serving does. A retry that comes through another proxy is known by
// HeldElsewhere when that proxy named it; past the bound, a full admission
// window asks Redis (holdsUse). A use released since only lets in a request
// that is then answered from its row, as any other.
func (a *Admitter) AdmittedHere(code string, cl voucher.Claim) bool {
	o, ok := a.admitted.Get(admittedKey(code, cl.OrderID))
	return ok && o.customer == cl.CustomerID && o.amount == cl.OrderAmount
}

// WritingHere reports whether this proxy is writing cl's order for cl's
// customer on flash voucher code: the gate admitted it and the ledger has not
// answered yet. A retry of it holds its use already, takes no new one and
// gets the answer of the write, so a full MAX_INFLIGHT lets it in too (the
// write's own request holds a slot meanwhile). Like AdmittedHere it asks
// nothing of Redis.
func (a *Admitter) WritingHere(code string, cl voucher.Claim) bool {
	return a.writing.has(code, cl)
}

// HeldElsewhere reports whether another proxy's gate call admitted cl's order
// for cl's customer on flash voucher code within the order's hold, as that
// proxy named it on heldChannel (SharePeers): a retry of it that comes here
// takes no new use and gets the answer of its row, so a full MAX_INFLIGHT
// lets it in as one of this proxy's own. Like AdmittedHere it asks nothing of
// Redis; an order whose message was lost waits for a slot like a new one.
func (a *Admitter) HeldElsewhere(code string, cl voucher.Claim) bool {
	return a.peers.heldElsewhere(code, cl)
}

// SharePeers names the orders this proxy's gate calls admit to the other
// proxies on heldChannel, and remembers theirs (HeldElsewhere), until ctx
// ends.
func (a *Admitter) SharePeers(ctx context.Context, rdb redis.UniversalClient, reg prometheus.Registerer) error {
	p, err := newPeers(rdb, reg)
	if err != nil {
		return err
	}
	a.peers = p
	go p.run(ctx)
	return nil
}

// admittedKey is the key of an order in the admitted cache.
func admittedKey(code, orderID string) string { return code + "/" + orderID }

// remember records, for hold, an order this proxy answered 201
// (AdmittedHere).
func (a *Admitter) remember(code string, cl voucher.Claim, hold time.Duration) {
	o := admittedOrder{customer: cl.CustomerID, amount: cl.OrderAmount}
	a.admitted.SetWithTTL(admittedKey(code, cl.OrderID), o, 1, hold)
}
