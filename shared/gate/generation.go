package gate

import (
	"context"
	"fmt"
	"strconv"
)

// Generation says where a loaded voucher's Redis state came from.
type Generation int

// Generations, the values generation.lua returns.
const (
	GenNotLoaded Generation = iota // the voucher is not in Redis
	GenCurrent                     // this Redis process wrote it from the database (a load or a reconcile)
	GenInherited                   // another process did, or no generation was recorded: a restart from a snapshot, a failover, a load before generations existed
)

// Generation reports whether the voucher's Redis state was written from the
// database by the Redis process serving it now. Each load and each reconcile
// records the process (its run_id) in meta; a state that process did not write
// came through a restart from a snapshot or a failover, and may lack orders the
// database committed after it was saved. Reconcile brings it up to date (and
// makes it GenCurrent).
func (g *Gate) Generation(ctx context.Context, code string) (Generation, error) {
	v, err := g.readOnly(ctx, generationScript, code, "generation")
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok || n < int64(GenNotLoaded) || n > int64(GenInherited) {
		return 0, fmt.Errorf("generation %s: unexpected reply %v (%T)", code, v, v)
	}
	return Generation(n), nil
}

// Reassert makes Redis hold each of orders, which the database has just
// committed as admitted: Redis may have lost one while its write was in flight
// (a reload from the database that ran before the commit, a restart from an older
// snapshot). An order Redis holds (for any customer) or records as finished
// (given back since the commit) is left alone; each one recorded takes a use from
// remaining (never below 0), which the database has already counted. It returns
// how many it recorded; 0 when the voucher is not loaded (the next load reads the
// database). No orders makes no call.
func (g *Gate) Reassert(ctx context.Context, code string, orders []Order) (int, error) {
	if len(orders) == 0 {
		return 0, nil
	}
	if err := checkCode(code); err != nil {
		return 0, err
	}
	seen, err := uniqueOrders(orders)
	if err != nil {
		return 0, fmt.Errorf("reassert %s: %w", code, err)
	}
	args := make([]any, 0, 2*len(seen))
	for _, o := range orders {
		if _, first := seen[o.OrderID]; first {
			delete(seen, o.OrderID)
			args = append(args, o.OrderID, strconv.FormatInt(o.CustomerID, 10))
		}
	}
	v, err := g.run(ctx, reassertScript, Keys(code), args...)
	if err != nil {
		return 0, fmt.Errorf("reassert %s: %w", code, err)
	}
	n, ok := v.(int64)
	if !ok || n < 0 || n > int64(len(args)/2) {
		return 0, fmt.Errorf("reassert %s: unexpected reply %v (%T)", code, v, v)
	}
	return int(n), nil
}

// Fingerprint summarises a voucher's Redis state: equal fingerprints read at
// two moments mean that, in between, no order was admitted, given back,
// restored or released, unless as many went each way. A restart or failover
// that brought an older copy is Generation's to notice, not this. The zero
// Fingerprint is a voucher that is not loaded.
type Fingerprint struct {
	Loaded              bool
	Remaining           string
	Orders, Users, Done int64
}

// Fingerprint reads the voucher's fingerprint in one read-only call.
func (g *Gate) Fingerprint(ctx context.Context, code string) (Fingerprint, error) {
	v, err := g.readOnly(ctx, fingerprintScr, code, "fingerprint")
	if err != nil {
		return Fingerprint{}, err
	}
	a, ok := v.([]any)
	if !ok || (len(a) != 0 && len(a) != 4) {
		return Fingerprint{}, fmt.Errorf("fingerprint %s: unexpected reply %v (%T)", code, v, v)
	}
	if len(a) == 0 {
		return Fingerprint{}, nil
	}
	f := Fingerprint{Loaded: true}
	var ok1, ok2, ok3, ok4 bool
	f.Remaining, ok1 = a[0].(string)
	f.Orders, ok2 = a[1].(int64)
	f.Users, ok3 = a[2].(int64)
	f.Done, ok4 = a[3].(int64)
	if !(ok1 && ok2 && ok3 && ok4) {
		return Fingerprint{}, fmt.Errorf("fingerprint %s: unexpected reply %v", code, a)
	}
	return f, nil
}
