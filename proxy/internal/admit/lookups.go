package admit

import (
	"context"

	"github.com/flashgate/flashgate/shared/voucher"
)

// lookUp reads a voucher's terms from the ledger, within the budget.
func (a *Admitter) lookUp(ctx context.Context, code string) (voucher.Voucher, error) {
	release, err := a.lookups.Take("look up voucher " + code)
	if err != nil {
		return voucher.Voucher{}, err
	}
	defer release()
	return a.ledger.Voucher(ctx, code)
}

// LoadCodes reads the set of codes; the proxy calls it once before it listens.
func (a *Admitter) LoadCodes(ctx context.Context) error { return a.codes.Load(ctx) }

// Known reports whether code may be a voucher's (codes.Set.Has): the order
// routes answer any other 404 at the edge.
func (a *Admitter) Known(ctx context.Context, code string) bool { return a.codes.Has(ctx, code) }
