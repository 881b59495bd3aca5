package admit

import (
	"context"

	"github.com/flashgate/flashgate/shared/voucher"
)

// lookUp reads a voucher's terms from the ledger, within the budget.
func (a *Admitter) lookUp(ctx context.Context, code string) (v voucher.Voucher, err error) {
	err = a.lookups.Do("look up voucher "+code, func() error {
		v, err = a.ledger.Voucher(ctx, code)
		return err
	})
	return v, err
}

// loadCodes reads the set of codes from the ledger, within the budget.
func (a *Admitter) loadCodes(ctx context.Context) (codes []string, err error) {
	err = a.lookups.Do("read the voucher codes", func() error {
		codes, err = a.ledger.VoucherCodes(ctx)
		return err
	})
	return codes, err
}

// LoadCodes reads the set of codes; the proxy calls it once before it listens.
func (a *Admitter) LoadCodes(ctx context.Context) error { return a.codes.Load(ctx) }

// Known reports whether code may be a voucher's (codes.Set.Has): the order
// routes answer any other 404 at the edge.
func (a *Admitter) Known(ctx context.Context, code string) bool { return a.codes.Has(ctx, code) }
