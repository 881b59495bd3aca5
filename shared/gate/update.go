package gate

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate/shared/voucher"
)

// UpdateResult reports what Update changed.
type UpdateResult struct {
	Loaded                          bool
	RemainingBefore, RemainingAfter int64
}

// Update applies a voucher's new terms to its loaded keys in one atomic step:
// remaining moves by the change of totalLimit (v.TotalLimit minus the totalLimit
// in meta), never below 0 and never above v.TotalLimit minus the orders holding
// a use; meta is rewritten from v (discountAmount, minOrderAmount, totalLimit,
// perUserLimit, startsAt, endsAt, paused); every key expires at v.EndsAt + 24h.
// Moving by the delta, not resetting from totalLimit, keeps the uses admitted
// meanwhile, and makes Update idempotent: the same v twice moves remaining once.
// A voucher that is not loaded is left alone (Loaded is false): the next load
// reads the database.
func (g *Gate) Update(ctx context.Context, code string, v voucher.Voucher) (UpdateResult, error) {
	if err := checkCode(code); err != nil {
		return UpdateResult{}, err
	}
	if err := checkTerms(v); err != nil {
		return UpdateResult{}, fmt.Errorf("update %s: %w", code, err)
	}
	reply, err := g.run(ctx, updateScript, Keys(code), termsArgs(v)...)
	if err != nil {
		return UpdateResult{}, fmt.Errorf("update %s: %w", code, err)
	}
	res, err := decodeUpdate(reply)
	if err != nil {
		return UpdateResult{}, fmt.Errorf("update %s: %w", code, err)
	}
	return res, nil
}
