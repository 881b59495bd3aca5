package gate

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// ReconcileResult reports what Reconcile changed.
type ReconcileResult struct {
	Loaded                          bool
	RemainingBefore, RemainingAfter int64
	Released                        []string // hanging orders removed, sorted
	Restored                        int      // database orders added back
}

// Reconcile makes Redis agree with dbActive, the database's active reservations
// of the voucher (every reservation holding a use), in one atomic script:
// Redis-only orders admitted longer than grace ago (by Redis's clock) are
// released, younger ones are kept because their database write may still be in
// flight; database orders missing from Redis are added with admission time now;
// users is rebuilt from orders; remaining becomes max(0, totalLimit - orders).
//
// Read dbActive before calling: a reservation released in between comes back
// (a slot held until the next round), never the other way round, as long as grace
// exceeds the longest admitted write plus the time between reading dbActive and
// this call. A voucher that is not loaded is left alone (Loaded is false).
func (g *Gate) Reconcile(ctx context.Context, code string, dbActive []Order, grace time.Duration) (ReconcileResult, error) {
	if err := checkCode(code); err != nil {
		return ReconcileResult{}, err
	}
	if grace < 0 {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: negative grace %s", code, grace)
	}
	seen := make(map[string]int64, len(dbActive))
	args := make([]any, 0, 1+2*len(dbActive))
	args = append(args, strconv.FormatInt(grace.Milliseconds(), 10))
	for _, o := range dbActive {
		if o.OrderID == "" {
			return ReconcileResult{}, fmt.Errorf("reconcile %s: order with empty id", code)
		}
		if c, dup := seen[o.OrderID]; dup {
			if c != o.CustomerID {
				return ReconcileResult{}, fmt.Errorf("reconcile %s: order %q held by customers %d and %d", code, o.OrderID, c, o.CustomerID)
			}
			continue
		}
		seen[o.OrderID] = o.CustomerID
		args = append(args, o.OrderID, strconv.FormatInt(o.CustomerID, 10))
	}
	v, err := g.run(ctx, reconcileScript, Keys(code), args...)
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	res, err := decodeReconcile(v)
	if err != nil {
		return ReconcileResult{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	return res, nil
}
