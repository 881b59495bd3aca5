package admissions

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/voucher"
)

// ReasonRejected is the reason of a record the database refused with an
// error no answer maps (a CHECK such as ck_order_amount, any integrity or
// data error): a record no correct admission makes, dead-lettered with the
// error rather than retried forever in front of its partition.
const ReasonRejected = store.ReasonRejected

// writeAlone writes batch claim by claim, each in its own transaction, after
// the database rejected it whole (store.Rejected): the claims it rejects
// alone are refused with ReasonRejected and their uses given back; the
// others are written or refused as usual. A fault stops it: the whole batch
// is written again (what was written is found by its redelivery).
func (c *Consumer) writeAlone(ctx context.Context, batch []sale.Batch) ([]sale.Refusal, error) {
	var refused []sale.Refusal
	for i, b := range batch {
		var rejected []string
		for j, cl := range b.Claims {
			one := b
			one.Claims = b.Claims[j : j+1 : j+1]
			if len(b.Promised) == len(b.Claims) {
				one.Promised = b.Promised[j : j+1 : j+1]
			}
			r, err := c.w.WriteLogged(ctx, []sale.Batch{one})
			if err == nil {
				for k := range r {
					r[k].Batch = i // r's own index is 0: its one-claim batch
				}
				refused = append(refused, r...)
				continue
			}
			what, ok := store.Rejected(err)
			if !ok {
				return nil, err
			}
			rejected = append(rejected, cl.OrderID)
			refused = append(refused, sale.Refusal{Batch: i, Code: b.Code, Claim: cl, Reason: ReasonRejected,
				Err: fmt.Errorf("%w: %w", voucher.Errorf(voucher.CodeInvalidRequest, "the database rejected the row: %s", what), store.ErrRejected)})
		}
		if err := c.w.GiveBackLogged(ctx, b.Code, rejected); err != nil {
			return nil, err
		}
	}
	return refused, nil
}
