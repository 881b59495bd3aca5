package systemtest

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// linWorkload is what the clients of one history do. Orders are picked from a
// window of orderIds that slides over orders as the run goes, so that calls
// collide (retries of one orderId, one orderId from two customers, several
// orders per customer) while late orders still find stock changing hands.
// The call is picked from what the last answer about the order said, so that
// reserved orders get released or confirmed and released ones confirmed late.
type linWorkload struct {
	seed      uint64
	clients   int
	customers int
	orders    int // orderIds over the whole run (<= linMaxOrders)
	window    int // orderIds in play at once
	ops       int // calls to record in the concurrent phase, retries included
	think     time.Duration
}

// linHints is the clients' shared, approximate view of each order: the status
// the last answer about it implied, or hintRefused after a refusal.
type linHints struct {
	mu     sync.Mutex
	status [linMaxOrders]uint8
}

// hintRefused: the last reserve of a new order was refused.
const hintRefused = ordReleased + 1

func (h *linHints) get(o uint8) uint8 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status[o]
}

func (h *linHints) learn(op linOp, r linResult) {
	var st uint8
	switch {
	case op.Kind == linReserve && r.Status == http.StatusCreated:
		st = ordReserved
	case r.Code == voucher.CodeReservationReleased || op.Kind == linRelease && r.Status == http.StatusNoContent:
		st = ordReleased
	case r.Code == voucher.CodeAlreadyConfirmed || r.Code == string(voucher.Confirmed):
		st = ordConfirmed
	case r.Code == string(voucher.Reserved):
		st = ordReserved
	case r.Code == string(voucher.Released):
		st = ordReleased
	case r.Code == voucher.CodeOutOfStock || r.Code == voucher.CodeAlreadyUsed:
		st = hintRefused
	default:
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.status[op.Order]
	if (old == ordConfirmed || old == ordReleased) && (st == ordReserved || st == hintRefused) {
		return // not news: a retry's answer
	}
	h.status[op.Order] = st
}

// linMix is, for unpaid and paid orders and per hint, the percentages of
// reserve, confirm and release; the rest are gets. Only every third order is
// ever paid (confirmed), since a confirmed order holds its use for good and
// stock must keep changing hands until the end of the run.
var linMix = [2][hintRefused + 1][3]int{
	{ // unpaid
		ordNone:     {80, 0, 8},
		ordReserved: {20, 0, 60},
		ordReleased: {35, 0, 35},
		hintRefused: {60, 0, 15},
	},
	{ // paid
		ordNone:      {75, 8, 7},
		ordReserved:  {20, 30, 30},
		ordConfirmed: {30, 20, 20},
		ordReleased:  {25, 45, 15},
		hintRefused:  {55, 15, 10},
	},
}

func (w linWorkload) next(rng *rand.Rand, hints *linHints, done int) linOp {
	base := 0
	if slide := w.orders - w.window; slide > 0 {
		base = min(slide, done*(slide+1)/w.ops)
	}
	o := base + rng.IntN(w.window)
	c := o%w.customers + 1 // each order has a home customer ...
	if rng.IntN(10) == 0 {
		c = rng.IntN(w.customers) + 1 // ... and sometimes another one tries it
	}
	op := linOp{Customer: uint8(c), Order: uint8(o)}
	paid := 0
	if o%3 == 2 {
		paid = 1
	}
	mix := linMix[paid][hints.get(uint8(o))]
	switch p := rng.IntN(100); {
	case p < mix[0]:
		op.Kind = linReserve
	case p < mix[0]+mix[1]:
		op.Kind = linConfirm
	case p < mix[0]+mix[1]+mix[2]:
		op.Kind = linRelease
	default:
		op.Kind = linGet
	}
	return op
}
