package gate

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"
)

var (
	//go:embed parked.lua
	parkedLua    string
	parkedScript = newScript(parkedLua)
)

// ParkedKey is the hash of a voucher's parked orders (parked.lua), in the
// voucher's slot: orderId -> the unix millis from which a settler may settle
// it. The reconciler frees none of them (reconcile.lua) until ParkedGiveUp
// after that.
func ParkedKey(code string) string { return "voucher:{" + code + "}:parked" }

// ParkedGiveUp is how long past its notBefore a parked order is left to the
// settlers; after it the reconciler frees it as any hanging admission (its
// settler is gone and no other adopted it). reconcile.lua holds the same
// number.
const ParkedGiveUp = 10 * time.Minute

// parkedKeys are the voucher's keys with its parked orders in the sixth place.
func parkedKeys(code string) []string { return append(Keys(code), ParkedKey(code)) }

// reconcileKeys are the keys of the reconcile scripts: the voucher's, its
// promises and its parked orders.
func reconcileKeys(code string) []string { return append(loggedKeys(code), ParkedKey(code)) }

// Park records that orderIDs of code are parked with a settler until
// notBefore: no reconciler frees them meanwhile.
func (g *Gate) Park(ctx context.Context, code string, orderIDs []string, notBefore time.Time) error {
	if len(orderIDs) == 0 {
		return nil
	}
	if err := checkCode(code); err != nil {
		return err
	}
	at := strconv.FormatInt(notBefore.UnixMilli(), 10)
	args := make([]any, 0, 1+2*len(orderIDs))
	args = append(args, "park")
	for _, id := range orderIDs {
		args = append(args, id, at)
	}
	if _, err := g.run(ctx, parkedScript, parkedKeys(code), args...); err != nil {
		return fmt.Errorf("park %d orders of %s: %w", len(orderIDs), code, err)
	}
	return nil
}

// Unpark removes orderIDs of code from the parked orders: settled.
func (g *Gate) Unpark(ctx context.Context, code string, orderIDs ...string) error {
	if len(orderIDs) == 0 {
		return nil
	}
	if err := checkCode(code); err != nil {
		return err
	}
	args := make([]any, 0, 1+len(orderIDs))
	args = append(args, "unpark")
	for _, id := range orderIDs {
		args = append(args, id)
	}
	if _, err := g.run(ctx, parkedScript, parkedKeys(code), args...); err != nil {
		return fmt.Errorf("unpark %d orders of %s: %w", len(orderIDs), code, err)
	}
	return nil
}

// Parked lists code's parked orders with their notBefore.
func (g *Gate) Parked(ctx context.Context, code string) (map[string]time.Time, error) {
	if err := checkCode(code); err != nil {
		return nil, err
	}
	v, err := g.run(ctx, parkedScript, parkedKeys(code), "list")
	if err != nil {
		return nil, fmt.Errorf("parked orders of %s: %w", code, err)
	}
	r, ok := v.([]any)
	if !ok || len(r)%2 != 0 {
		return nil, fmt.Errorf("parked orders of %s: unexpected reply %v: %w", code, v, ErrBadState)
	}
	out := make(map[string]time.Time, len(r)/2)
	for i := 0; i < len(r); i += 2 {
		id, _ := r[i].(string)
		s, _ := r[i+1].(string)
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id == "" {
			return nil, fmt.Errorf("parked orders of %s: malformed %v: %w", code, r[i:i+2], ErrBadState)
		}
		out[id] = time.UnixMilli(ms).UTC()
	}
	return out, nil
}
