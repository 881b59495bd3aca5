package load

import (
	"math"
	"math/rand/v2"
	"strconv"
)

// Crowd says who sends a burst: how many requests, from how many customers, and
// which share of them are retries of an earlier order.
type Crowd struct {
	Requests  int     // requests in the burst
	Customers int     // distinct customer ids the orders are spread over
	Retry     float64 // share of requests that resend an earlier orderId (0..1)
	Seed      uint64  // the same seed gives the same plan
}

// Order is one order of the plan: its id and the customer placing it.
type Order struct {
	ID       string
	Customer int64
	Amount   int64 // its order amount; 0: the harness's OrderAmount
}

// Plan is a burst laid out in send order: Requests[i] is the index in Orders of
// the order that request i sends. A retry sends an order that an earlier request
// sent first, with the same customer and body.
type Plan struct {
	Orders   []Order
	Requests []int32
	Retries  int
}

// NewPlan lays out c's requests for voucher code. New orders go to customers
// 1..Customers in turn, so every customer orders once before any orders twice;
// retries pick an earlier order at random. Order ids start with code, which makes
// them unique across bursts (order_id is UNIQUE over all vouchers).
func NewPlan(code string, c Crowd) Plan {
	n := max(c.Requests, 0)
	customers := max(c.Customers, 1)
	retries := int(math.Round(float64(n) * min(max(c.Retry, 0), 1)))
	if n > 0 {
		retries = min(retries, n-1) // the first request cannot be a retry
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))

	// Exactly `retries` retry slots, anywhere but first.
	isRetry := make([]bool, n)
	for i := range retries {
		isRetry[n-1-i] = true
	}
	if n > 1 {
		rest := isRetry[1:]
		rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	}

	p := Plan{Orders: make([]Order, 0, n-retries), Requests: make([]int32, n), Retries: retries}
	for i := range n {
		if isRetry[i] {
			p.Requests[i] = int32(rng.IntN(len(p.Orders)))
			continue
		}
		j := len(p.Orders)
		p.Orders = append(p.Orders, Order{
			ID:       code + "-" + strconv.FormatInt(int64(j), 36),
			Customer: int64(j%customers) + 1,
		})
		p.Requests[i] = int32(j)
	}
	return p
}

// Demand is how many uses the plan's orders can take at most with a per-customer
// limit: each customer's distinct orders, capped at perUser, summed.
func (p Plan) Demand(perUser int) int {
	per := map[int64]int{}
	for _, o := range p.Orders {
		per[o.Customer]++
	}
	d := 0
	for _, n := range per {
		d += min(n, perUser)
	}
	return d
}

// DistinctCustomers is how many customers place at least one order.
func (p Plan) DistinctCustomers() int {
	seen := map[int64]struct{}{}
	for _, o := range p.Orders {
		seen[o.Customer] = struct{}{}
	}
	return len(seen)
}

// The money terms of every voucher the harness creates; orders are above the
// minimum so that every request is eligible.
const (
	DiscountAmount = 100_000
	MinOrderAmount = 500_000
	OrderAmount    = 750_000
)
