package gate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Order is one admitted order. AdmittedAt is Redis's clock at admission.
type Order struct {
	OrderID    string
	CustomerID int64
	AdmittedAt time.Time
}

// Snapshot is what Load copies from the database: the voucher, its remaining
// uses, the active reservations and the finished ones. Orders must hold every
// reservation that holds a use (reserved or confirmed); a zero AdmittedAt means
// "now" by Redis's clock. Finished holds the reservations whose row gave its use
// back (RELEASED or REFUNDED; AdmittedAt unused), loaded into done. Of the
// voucher, Redis keeps the terms (amounts, limits, window, FlashSale, Paused,
// RequireCheckoutToken);
// its code and counters are not stored.
type Snapshot struct {
	Voucher   voucher.Voucher
	Remaining int64
	Orders    []Order
	Finished  []Order
}

// State is one consistent reading of a voucher: its counter, every order holding
// a use (sorted by OrderID), the finished orders in done (sorted ids) and
// Redis's clock at the moment of reading.
type State struct {
	Remaining int64
	Orders    []Order
	Finished  []string
	Now       time.Time
}

// Load copies snap into Redis (remaining, users counted from the orders, orders,
// meta, done) in one atomic step, only if the voucher's counter does not exist: a
// live counter is never overwritten. It reports whether it loaded. All five keys
// expire at Voucher.EndsAt + 24h. A snapshot whose counter exceeds
// TotalLimit minus its orders is refused, as it could oversell, and so is an
// order both active and finished. The orders of a log voucher promised 201s
// whose rows are not written yet (their promises, LoggedKey, outlive an
// Unload) are held too, each taking a use.
func (g *Gate) Load(ctx context.Context, code string, snap Snapshot) (bool, error) {
	if err := checkCode(code); err != nil {
		return false, err
	}
	m := snap.Voucher
	if err := checkTerms(m); err != nil {
		return false, fmt.Errorf("load %s: %w", code, err)
	}
	seen, err := uniqueOrders(snap.Orders)
	if err != nil {
		return false, fmt.Errorf("load %s: %w", code, err)
	}
	if snap.Remaining < 0 || snap.Remaining > int64(m.TotalLimit)-int64(len(seen)) {
		return false, fmt.Errorf("load %s: remaining %d with %d orders exceeds total limit %d",
			code, snap.Remaining, len(seen), m.TotalLimit)
	}
	finished, err := uniqueOrders(snap.Finished)
	if err != nil {
		return false, fmt.Errorf("load %s: finished %w", code, err)
	}
	for id := range finished {
		if _, ok := seen[id]; ok {
			return false, fmt.Errorf("load %s: order %q both active and finished", code, id)
		}
	}

	expireAt := m.EndsAt.Add(24 * time.Hour).UnixMilli()
	args := make([]any, 0, 12+3*len(snap.Orders)+2*len(snap.Finished))
	args = append(args, strconv.FormatInt(snap.Remaining, 10))
	args = append(args, termsArgs(m)...)
	args = append(args, flag(m.FlashSale), strconv.Itoa(len(snap.Orders)))
	for _, o := range snap.Orders {
		args = append(args, o.OrderID, strconv.FormatInt(o.CustomerID, 10), millis(o.AdmittedAt))
	}
	for _, o := range snap.Finished {
		args = append(args, o.OrderID, strconv.FormatInt(o.CustomerID, 10))
	}
	v, err := g.run(ctx, loadScript, loggedKeys(code), args...)
	if err != nil {
		return false, fmt.Errorf("load %s: %w", code, err)
	}
	switch v {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	case int64(-1):
		return false, fmt.Errorf("load %s: ends_at + 24h (%s) has passed by Redis's clock", code, time.UnixMilli(expireAt).UTC())
	}
	return false, fmt.Errorf("load %s: unexpected reply %v (%T)", code, v, v)
}

// Meta reads the voucher's cached terms (with its code; the counters stay zero)
// and the remaining count in Redis; ok is false when the voucher is not loaded.
func (g *Gate) Meta(ctx context.Context, code string) (v voucher.Voucher, remaining int64, ok bool, err error) {
	reply, err := g.readOnly(ctx, metaScript, code, "meta")
	if err != nil {
		return voucher.Voucher{}, 0, false, err
	}
	v, remaining, ok, err = decodeMeta(reply)
	if err != nil {
		return voucher.Voucher{}, 0, false, fmt.Errorf("meta %s: %w", code, err)
	}
	if ok {
		v.Code = code
	}
	return v, remaining, ok, nil
}

// State reads a voucher's counter, all its orders, its finished orders and
// Redis's clock in one atomic step; loaded is false when the voucher is not
// loaded.
func (g *Gate) State(ctx context.Context, code string) (st State, loaded bool, err error) {
	v, err := g.readOnly(ctx, stateScript, code, "state")
	if err != nil {
		return State{}, false, err
	}
	st, loaded, err = decodeState(v)
	if err != nil {
		return State{}, false, fmt.Errorf("state %s: %w", code, err)
	}
	return st, loaded, nil
}

// checkTerms refuses terms Redis cannot keep: Redis needs an end (the keys
// expire a day after it) and limits a reserve can count against.
func checkTerms(v voucher.Voucher) error {
	if v.EndsAt.IsZero() {
		return fmt.Errorf("EndsAt is required")
	}
	if v.TotalLimit < 0 || v.PerUserLimit < 1 {
		return fmt.Errorf("TotalLimit %d, PerUserLimit %d", v.TotalLimit, v.PerUserLimit)
	}
	return nil
}

// termsArgs is the ARGV block load.lua, update.lua and reconcile.lua share
// (prelude.lua's writeTerms): expire-at (endsAt + 24h), discountAmount,
// minOrderAmount, totalLimit, perUserLimit, startsAt, endsAt, paused,
// checkoutToken (RequireCheckoutToken: for the proxy, which reads the terms
// from meta; no script checks it).
func termsArgs(v voucher.Voucher) []any {
	return []any{
		strconv.FormatInt(v.EndsAt.Add(24*time.Hour).UnixMilli(), 10),
		strconv.FormatInt(v.DiscountAmount, 10),
		strconv.FormatInt(v.MinOrderAmount, 10),
		strconv.Itoa(v.TotalLimit),
		strconv.Itoa(v.PerUserLimit),
		millis(v.StartsAt),
		millis(v.EndsAt),
		flag(v.Paused),
		flag(v.RequireCheckoutToken),
	}
}

// uniqueOrders maps order ids to customers, refusing an empty id and an order
// given to two customers (a repeat with the same customer counts once).
func uniqueOrders(orders []Order) (map[string]int64, error) {
	seen := make(map[string]int64, len(orders))
	for _, o := range orders {
		if o.OrderID == "" {
			return nil, fmt.Errorf("order with empty id")
		}
		if c, dup := seen[o.OrderID]; dup && c != o.CustomerID {
			return nil, fmt.Errorf("order %q held by customers %d and %d", o.OrderID, c, o.CustomerID)
		}
		seen[o.OrderID] = o.CustomerID
	}
	return seen, nil
}
