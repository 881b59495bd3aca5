package gate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// ReconcileResult reports what Reconcile changed.
type ReconcileResult struct {
	Loaded                          bool
	RemainingBefore, RemainingAfter int64
	Released                        []string // hanging orders removed, sorted
	Restored                        int      // database orders added back
	TermsChanged                    bool     // meta differed from the voucher's terms and was rewritten
}

// Reconcile makes Redis agree with dbActive, the database's active reservations
// of the voucher (every reservation holding a use), in one atomic script:
// Redis-only orders admitted longer than grace ago (by Redis's clock) are
// released, younger ones are kept because their database write may still be in
// flight; database orders missing from Redis are added with admission time now
// (and leave done); users is rebuilt from orders; meta is rewritten from v, the
// voucher's current terms, and the keys expire at v.EndsAt + 24h; remaining
// becomes max(0, v.TotalLimit - orders). v's limits, never the loaded ones,
// decide: a change whose Update was lost is applied here.
//
// Read dbActive before calling: a reservation released in between comes back
// (a slot held until the next round), never the other way round, as long as grace
// exceeds the longest admitted write plus the time between reading dbActive and
// this call. A voucher that is not loaded is left alone (Loaded is false).
func (g *Gate) Reconcile(ctx context.Context, code string, v voucher.Voucher, dbActive []Order, grace time.Duration) (ReconcileResult, error) {
	if err := checkCode(code); err != nil {
		return ReconcileResult{}, err
	}
	if grace < 0 {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: negative grace %s", code, grace)
	}
	if err := checkTerms(v); err != nil {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	seen, err := uniqueOrders(dbActive)
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	args := make([]any, 0, 9+2*len(seen))
	args = append(args, strconv.FormatInt(grace.Milliseconds(), 10))
	args = append(args, termsArgs(v)...)
	for _, o := range dbActive {
		if _, first := seen[o.OrderID]; first {
			delete(seen, o.OrderID)
			args = append(args, o.OrderID, strconv.FormatInt(o.CustomerID, 10))
		}
	}
	reply, err := g.run(ctx, reconcileScript, Keys(code), args...)
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	res, err := decodeReconcile(reply)
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	return res, nil
}
