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
// uses and the active reservations. Orders must hold every reservation that
// holds a use (reserved or confirmed); a zero AdmittedAt means "now" by Redis's
// clock. Of the voucher, Redis keeps the terms (amounts, limits, window,
// FlashSale); its code and counters are not stored.
type Snapshot struct {
	Voucher   voucher.Voucher
	Remaining int64
	Orders    []Order
}

// State is one consistent reading of a voucher: its counter, every order holding
// a use (sorted by OrderID) and Redis's clock at the moment of reading.
type State struct {
	Remaining int64
	Orders    []Order
	Now       time.Time
}

// Load copies snap into Redis (remaining, users counted from the orders, orders,
// meta) in one atomic step, only if the voucher's counter does not exist: a live
// counter is never overwritten. It reports whether it loaded. All four keys
// expire at Voucher.EndsAt + 24h. A snapshot whose counter exceeds
// TotalLimit minus its orders is refused, as it could oversell.
func (g *Gate) Load(ctx context.Context, code string, snap Snapshot) (bool, error) {
	if err := checkCode(code); err != nil {
		return false, err
	}
	m := snap.Voucher
	if m.EndsAt.IsZero() {
		return false, fmt.Errorf("load %s: EndsAt is required", code)
	}
	if m.TotalLimit < 0 || m.PerUserLimit < 1 {
		return false, fmt.Errorf("load %s: TotalLimit %d, PerUserLimit %d", code, m.TotalLimit, m.PerUserLimit)
	}
	seen := make(map[string]int64, len(snap.Orders))
	for _, o := range snap.Orders {
		if o.OrderID == "" {
			return false, fmt.Errorf("load %s: order with empty id", code)
		}
		if c, dup := seen[o.OrderID]; dup && c != o.CustomerID {
			return false, fmt.Errorf("load %s: order %q held by customers %d and %d", code, o.OrderID, c, o.CustomerID)
		}
		seen[o.OrderID] = o.CustomerID
	}
	if snap.Remaining < 0 || snap.Remaining > int64(m.TotalLimit)-int64(len(seen)) {
		return false, fmt.Errorf("load %s: remaining %d with %d orders exceeds total limit %d",
			code, snap.Remaining, len(seen), m.TotalLimit)
	}

	expireAt := m.EndsAt.Add(24 * time.Hour).UnixMilli()
	args := make([]any, 0, 9+3*len(snap.Orders))
	args = append(args,
		strconv.FormatInt(snap.Remaining, 10),
		strconv.FormatInt(expireAt, 10),
		strconv.FormatInt(m.DiscountAmount, 10),
		strconv.FormatInt(m.MinOrderAmount, 10),
		strconv.Itoa(m.TotalLimit),
		strconv.Itoa(m.PerUserLimit),
		millis(m.StartsAt),
		millis(m.EndsAt),
		flag(m.FlashSale),
	)
	for _, o := range snap.Orders {
		args = append(args, o.OrderID, strconv.FormatInt(o.CustomerID, 10), millis(o.AdmittedAt))
	}
	v, err := g.run(ctx, loadScript, Keys(code), args...)
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
	if err := checkCode(code); err != nil {
		return voucher.Voucher{}, 0, false, err
	}
	keys := Keys(code)
	reply, err := g.runRO(ctx, metaScript, []string{keys[0], keys[3]})
	if err != nil {
		return voucher.Voucher{}, 0, false, fmt.Errorf("meta %s: %w", code, err)
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

// State reads a voucher's counter, all its orders and Redis's clock in one atomic
// step; loaded is false when the voucher is not loaded.
func (g *Gate) State(ctx context.Context, code string) (st State, loaded bool, err error) {
	if err := checkCode(code); err != nil {
		return State{}, false, err
	}
	keys := Keys(code)
	v, err := g.runRO(ctx, stateScript, []string{keys[0], keys[2]})
	if err != nil {
		return State{}, false, fmt.Errorf("state %s: %w", code, err)
	}
	st, loaded, err = decodeState(v)
	if err != nil {
		return State{}, false, fmt.Errorf("state %s: %w", code, err)
	}
	return st, loaded, nil
}
