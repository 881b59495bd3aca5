package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/flashgate/flashgate/shared/voucher"
)

// lookupBudget bounds the proxy's lookups at the ledger (a voucher's terms,
// the set of codes) to LEDGER_LOOKUPS at once. Over budget a lookup is not
// queued: the request is answered 503 at once, with its cause logged, so no
// request holds one of MAX_INFLIGHT's slots waiting for the budget, and
// lookups never crowd out the reserves. Unknown codes never get here
// (voucherCodes), and concurrent lookups of one code share one call.
type lookupBudget struct {
	slots    chan struct{}
	inflight atomic.Int64
	refused  atomic.Int64
}

func newLookupBudget(n int) *lookupBudget {
	return &lookupBudget{slots: make(chan struct{}, max(n, 1))}
}

// do runs f, a lookup named what, if the budget has room.
func (b *lookupBudget) do(what string, f func() error) error {
	select {
	case b.slots <- struct{}{}:
	default:
		b.refused.Add(1)
		return fmt.Errorf("%s: %d lookups at the ledger in flight (LEDGER_LOOKUPS): %w",
			what, cap(b.slots), voucher.ErrUnavailable)
	}
	b.inflight.Add(1)
	defer func() {
		b.inflight.Add(-1)
		<-b.slots
	}()
	return f()
}

// lookUp reads a voucher's terms from the ledger, within the budget.
func (a *Admitter) lookUp(ctx context.Context, code string) (v voucher.Voucher, err error) {
	err = a.lookups.do("look up voucher "+code, func() error {
		v, err = a.ledger.Voucher(ctx, code)
		return err
	})
	return v, err
}

// loadCodes reads the set of codes from the ledger, within the budget.
func (a *Admitter) loadCodes(ctx context.Context) (codes []string, err error) {
	err = a.lookups.do("read the voucher codes", func() error {
		codes, err = a.ledger.VoucherCodes(ctx)
		return err
	})
	return codes, err
}

// LoadCodes reads the set of codes; the proxy calls it once before it listens.
func (a *Admitter) LoadCodes(ctx context.Context) error { return a.codes.Load(ctx) }
