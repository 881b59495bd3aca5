package admit

import (
	"context"
	"fmt"
	"sync"

	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/voucher"
)

// notDelivered reports whether a ledger call did nothing at the ledger: it was
// never sent (ledger.NeverSent), or the ledger shed it before any handler ran
// (api.HeaderShed). Then no row can exist for what it carried.
func notDelivered(rep ledger.Reply, err error) bool {
	if err == nil {
		return rep.Shed
	}
	return ledger.NeverSent(err)
}

// giveBack returns the Redis use of an admitted claim that provably never
// reached the ledger (notDelivered) and that no other request of this proxy
// is writing: no row can hold it, and its retry is admitted again. Giving it
// back is the proxy's to do, since the ledger never heard of the claim; left
// held, it would wait for the reconciler's HANGING_GRACE.
func (a *Admitter) giveBack(code, orderID string) {
	ctx, cancel := context.WithTimeout(a.base, a.cfg.RedisTimeout)
	defer cancel()
	if _, err := a.gate.GiveBack(ctx, code, orderID); err != nil {
		// Whether it ran is unknown now: the ledger settles it once it answers.
		a.log.Warn("give back a claim the ledger never received", "code", code, "order", orderID,
			"err", fmt.Errorf("handed over to the ledger: %w", err))
		a.handOver.Give(code, orderID)
	}
}

// writes tracks the admitted claims this proxy is writing, by voucher and
// orderId: a claim whose write was not delivered is given back only when no
// other write of the same order (a retry on another lane) overlapped it here.
// An earlier write of the order that committed left it held in Redis, so a
// later claim of it is a Duplicate, never given back.
type writes struct {
	mu sync.Mutex
	m  map[[2]string]*writing
}

type writing struct {
	n          int   // writes of the order under way
	overlapped bool  // two or more were under way at once since n was 0
	customer   int64 // of the first of them
}

// add records a write of cl's order starting; the returned func records its
// end and reports whether no other write of the order overlapped it.
func (w *writes) add(code string, cl voucher.Claim) (done func() (alone bool)) {
	k := [2]string{code, cl.OrderID}
	w.mu.Lock()
	if w.m == nil {
		w.m = map[[2]string]*writing{}
	}
	e := w.m[k]
	if e == nil {
		e = &writing{customer: cl.CustomerID}
		w.m[k] = e
	}
	e.n++
	e.overlapped = e.overlapped || e.n > 1
	w.mu.Unlock()
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		alone := !e.overlapped
		if e.n--; e.n == 0 {
			delete(w.m, k)
		}
		return alone
	}
}

// has reports whether a write of cl's order for cl's customer is under way.
func (w *writes) has(code string, cl voucher.Claim) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := w.m[[2]string{code, cl.OrderID}]
	return e != nil && e.customer == cl.CustomerID
}
