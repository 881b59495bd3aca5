package codes

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/voucher"
)

// LookupBudget bounds the proxy's lookups at the ledger (a voucher's terms,
// the set of codes) to LEDGER_LOOKUPS at once. Over budget a lookup is not
// queued: the request is answered 503 at once, with its cause logged, so no
// request holds one of MAX_INFLIGHT's slots waiting for the budget, and
// lookups never crowd out the reserves. Unknown codes never get here (Set),
// and concurrent lookups of one code share one call.
type LookupBudget struct {
	slots    chan struct{}
	inflight atomic.Int64
	refused  atomic.Int64
}

// NewLookupBudget returns a budget of n lookups at once (at least one).
func NewLookupBudget(n int) *LookupBudget {
	return &LookupBudget{slots: make(chan struct{}, max(n, 1))}
}

// Take takes a place for a lookup named what, if the budget has room; the
// lookup calls release when it is done.
func (b *LookupBudget) Take(what string) (release func(), err error) {
	select {
	case b.slots <- struct{}{}:
	default:
		b.refused.Add(1)
		return nil, fmt.Errorf("%s: %d lookups at the ledger in flight (LEDGER_LOOKUPS): %w",
			what, cap(b.slots), voucher.ErrUnavailable)
	}
	b.inflight.Add(1)
	return func() {
		b.inflight.Add(-1)
		<-b.slots
	}, nil
}

// FromLedger is a Set's load: the set of codes read from the ledger, within
// budget b.
func FromLedger(lc *ledger.Client, b *LookupBudget) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		release, err := b.Take("read the voucher codes")
		if err != nil {
			return nil, err
		}
		defer release()
		return lc.VoucherCodes(ctx)
	}
}

// InFlight is how many lookups run now.
func (b *LookupBudget) InFlight() int64 { return b.inflight.Load() }

// Refused is how many lookups were refused over the budget.
func (b *LookupBudget) Refused() int64 { return b.refused.Load() }
