package gate

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"
)

var (
	//go:embed promise.lua
	promiseLua string
	//go:embed limit.lua
	limitLua string

	promiseScript = newScript(promiseLua)
	limitScript   = newScript(limitLua)
)

// LoggedKey is the hash of a log voucher's promises (promise.lua), in the
// voucher's slot: orderId -> Promise.encode.
func LoggedKey(code string) string { return "voucher:{" + code + "}:logged" }

// loggedKeys are the voucher's keys and its promises, the keys the scripts
// that must respect promises take.
func loggedKeys(code string) []string { return append(Keys(code), LoggedKey(code)) }

// Promise is what a 201 for a log voucher's order promised, kept in Redis
// until the consumer wrote the order's row: a retry is answered from it, and
// no give-back, reconcile or settler frees the order's use meanwhile.
type Promise struct {
	OrderID        string
	CustomerID     int64
	OrderAmount    int64
	DiscountAmount int64
	AdmittedAt     time.Time
	ExpiresAt      time.Time
	// Logged: the broker acknowledged the record. A pending (or taken
	// over) promise's record may be in flight: its order is answered 503
	// until it is settled.
	Logged bool
}

// encode is p's value in the hash: "state:customer:amount:discount:admitted:expires".
func (p Promise) encode() string {
	state := "p"
	if p.Logged {
		state = "l"
	}
	return strings.Join([]string{state, strconv.FormatInt(p.CustomerID, 10), strconv.FormatInt(p.OrderAmount, 10),
		strconv.FormatInt(p.DiscountAmount, 10), strconv.FormatInt(p.AdmittedAt.UnixMilli(), 10),
		strconv.FormatInt(p.ExpiresAt.UnixMilli(), 10)}, ":")
}

// decodePromise reads a value of the hash.
func decodePromise(orderID, s string) (Promise, error) {
	f := strings.Split(s, ":")
	if len(f) != 6 || (f[0] != "p" && f[0] != "t" && f[0] != "l") {
		return Promise{}, fmt.Errorf("promise of %s: malformed %q: %w", orderID, s, ErrBadState)
	}
	n := make([]int64, 5)
	for i := range n {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return Promise{}, fmt.Errorf("promise of %s: malformed %q: %w", orderID, s, ErrBadState)
		}
		n[i] = v
	}
	return Promise{OrderID: orderID, CustomerID: n[0], OrderAmount: n[1], DiscountAmount: n[2],
		AdmittedAt: time.UnixMilli(n[3]).UTC(), ExpiresAt: time.UnixMilli(n[4]).UTC(), Logged: f[0] == "l"}, nil
}

// Promise records ps (pending) for orders of code that have none, and
// returns, per promise, the one the order had already (found false when
// this call recorded it).
func (g *Gate) Promise(ctx context.Context, code string, ps []Promise) (had []Promise, found []bool, err error) {
	if len(ps) == 0 {
		return nil, nil, nil
	}
	if err := checkCode(code); err != nil {
		return nil, nil, err
	}
	args := make([]any, 0, 1+2*len(ps))
	args = append(args, "make")
	for _, p := range ps {
		p.Logged = false
		args = append(args, p.OrderID, p.encode())
	}
	v, err := g.run(ctx, promiseScript, loggedKeys(code), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("promise %s: %w", code, err)
	}
	return decodePromises(code, ps, v)
}

// Promises reads the promises of orderIDs of code (found false: none).
func (g *Gate) Promises(ctx context.Context, code string, orderIDs ...string) ([]Promise, []bool, error) {
	if len(orderIDs) == 0 {
		return nil, nil, nil
	}
	if err := checkCode(code); err != nil {
		return nil, nil, err
	}
	args := []any{"read"}
	ps := make([]Promise, len(orderIDs))
	for i, id := range orderIDs {
		args, ps[i].OrderID = append(args, id), id
	}
	v, err := g.run(ctx, promiseScript, loggedKeys(code), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("promises %s: %w", code, err)
	}
	return decodePromises(code, ps, v)
}

// decodePromises reads promise.lua's answer to make or read about ps.
func decodePromises(code string, ps []Promise, v any) ([]Promise, []bool, error) {
	raw, ok := v.([]any)
	if !ok || len(raw) != len(ps) {
		return nil, nil, fmt.Errorf("promise %s: unexpected reply %v: %w", code, v, ErrBadState)
	}
	had, found := make([]Promise, len(ps)), make([]bool, len(ps))
	for i, r := range raw {
		s, ok := r.(string)
		if !ok {
			return nil, nil, fmt.Errorf("promise %s: unexpected reply %v: %w", code, v, ErrBadState)
		}
		if s == "" {
			continue
		}
		p, err := decodePromise(ps[i].OrderID, s)
		if err != nil {
			return nil, nil, err
		}
		had[i], found[i] = p, true
	}
	return had, found, nil
}

// Abandon removes the pending promises of orderIDs whose produce failed,
// unless a retry took one over meanwhile (its record may be in the log
// now); it returns those it removed, whose uses may be given back.
func (g *Gate) Abandon(ctx context.Context, code string, orderIDs ...string) ([]string, error) {
	if len(orderIDs) == 0 {
		return nil, nil
	}
	if err := checkCode(code); err != nil {
		return nil, err
	}
	args := []any{"abandon"}
	for _, id := range orderIDs {
		args = append(args, id)
	}
	v, err := g.run(ctx, promiseScript, loggedKeys(code), args...)
	if err != nil {
		return nil, fmt.Errorf("abandon promises of %s: %w", code, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != len(orderIDs) {
		return nil, fmt.Errorf("abandon promises of %s: unexpected reply %v: %w", code, v, ErrBadState)
	}
	var removed []string
	for i, x := range r {
		if x == int64(1) {
			removed = append(removed, orderIDs[i])
		}
	}
	return removed, nil
}

// TakeOver marks orderID's pending promise taken over when it was admitted
// before cutoff: its ledger died before the broker answered (or is still
// waiting far longer than a produce may take), and the caller produces its
// record again with the same values (the consumer writes one row of two
// such records). It reports whether it did.
func (g *Gate) TakeOver(ctx context.Context, code, orderID string, cutoff time.Time) (bool, error) {
	if err := checkCode(code); err != nil {
		return false, err
	}
	v, err := g.run(ctx, promiseScript, loggedKeys(code), "takeover", orderID, cutoff.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("take over the promise of %s/%s: %w", code, orderID, err)
	}
	return v == int64(1), nil
}

// TakeOverStale takes over every pending or taken-over promise of code
// admitted before cutoff and returns them: promises a ledger left behind
// (it died, or its Redis step failed, before it logged or abandoned them),
// whose records the caller produces again with the same values. It reads
// the hash in HSCAN steps, each one script, so that a long hash does not
// hold Redis.
func (g *Gate) TakeOverStale(ctx context.Context, code string, cutoff time.Time) ([]Promise, error) {
	if err := checkCode(code); err != nil {
		return nil, err
	}
	var out []Promise
	cursor := "0"
	for {
		v, err := g.run(ctx, promiseScript, loggedKeys(code), "stale", cutoff.UnixMilli(), cursor, staleScanCount)
		if err != nil {
			return out, fmt.Errorf("take over the stale promises of %s: %w", code, err)
		}
		r, ok := v.([]any)
		if !ok || len(r)%2 != 1 {
			return out, fmt.Errorf("take over the stale promises of %s: unexpected reply %v: %w", code, v, ErrBadState)
		}
		for i := 1; i < len(r); i += 2 {
			id, _ := r[i].(string)
			s, _ := r[i+1].(string)
			p, err := decodePromise(id, s)
			if err != nil {
				return out, err
			}
			out = append(out, p)
		}
		if cursor, _ = r[0].(string); cursor == "0" || cursor == "" {
			return out, nil
		}
	}
}

// staleScanCount is the HSCAN count of one TakeOverStale step.
const staleScanCount = 200

// Record names one record of an order in the admissions log by the
// admission time its promise carried (zero for a record produced before
// promises).
type Record struct {
	OrderID    string
	AdmittedAt time.Time
}

func recordArgs(op string, recs []Record) []any {
	args := make([]any, 0, 1+2*len(recs))
	args = append(args, op)
	for _, r := range recs {
		at := ""
		if !r.AdmittedAt.IsZero() {
			at = strconv.FormatInt(r.AdmittedAt.UnixMilli(), 10)
		}
		args = append(args, r.OrderID, at)
	}
	return args
}

// Abandoned reports, per record, whether its promise was abandoned after a
// produce that failed (Abandon): its use was given back and its client
// answered 503, so a record the broker kept all the same is skipped. In the
// same step the pending promise of every other record becomes logged (the
// consumer holds the record: the broker kept it), so that an Abandon coming
// after it, from a produce that reported a failure all the same, leaves the
// promise and the use held while the consumer writes the row: the check and
// the write are one decision, whichever runs first.
func (g *Gate) Abandoned(ctx context.Context, code string, recs []Record) ([]bool, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	if err := checkCode(code); err != nil {
		return nil, err
	}
	v, err := g.run(ctx, promiseScript, loggedKeys(code), recordArgs("abandoned", recs)...)
	if err != nil {
		return nil, fmt.Errorf("abandoned promises of %s: %w", code, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != len(recs) {
		return nil, fmt.Errorf("abandoned promises of %s: unexpected reply %v: %w", code, v, ErrBadState)
	}
	out := make([]bool, len(recs))
	for i, x := range r {
		out[i] = x == int64(1)
	}
	return out, nil
}

// Settle removes the promises of the records the consumer decided, each only
// if it is the record's own (a later promise of the same order, made after
// this record's was abandoned, stays), and their tombstones.
func (g *Gate) Settle(ctx context.Context, code string, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	if err := checkCode(code); err != nil {
		return err
	}
	if _, err := g.run(ctx, promiseScript, loggedKeys(code), recordArgs("settle", recs)...); err != nil {
		return fmt.Errorf("settle promises of %s: %w", code, err)
	}
	return nil
}

// MarkLogged records that the broker acknowledged the records of orderIDs.
func (g *Gate) MarkLogged(ctx context.Context, code string, orderIDs ...string) error {
	return g.promiseOp(ctx, code, "logged", orderIDs)
}

// Forget removes the promises of orderIDs: their rows are written, or their
// records are not in the log (a failed produce) or were refused. It does not
// give their uses back: GiveBack, which skips orders with a promise, does.
func (g *Gate) Forget(ctx context.Context, code string, orderIDs ...string) error {
	return g.promiseOp(ctx, code, "forget", orderIDs)
}

func (g *Gate) promiseOp(ctx context.Context, code, op string, orderIDs []string) error {
	if len(orderIDs) == 0 {
		return nil
	}
	if err := checkCode(code); err != nil {
		return err
	}
	args := make([]any, 0, 1+len(orderIDs))
	args = append(args, op)
	for _, id := range orderIDs {
		args = append(args, id)
	}
	if _, err := g.run(ctx, promiseScript, loggedKeys(code), args...); err != nil {
		return fmt.Errorf("promise %s %s: %w", op, code, err)
	}
	return nil
}

// LowerLimit takes a lower totalLimit into Redis before the database (see
// limit.lua): refused (nothing changed) when the uses Redis holds, those of
// records still in the admissions log included, exceed it. loaded is false
// when the voucher is not in Redis (nothing changed). Undo it with Update and
// the database's terms.
func (g *Gate) LowerLimit(ctx context.Context, code string, total int) (loaded, refused bool, held int64, err error) {
	if err := checkCode(code); err != nil {
		return false, false, 0, err
	}
	v, err := g.run(ctx, limitScript, Keys(code), total)
	if err != nil {
		return false, false, 0, fmt.Errorf("lower the limit of %s: %w", code, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) < 1 {
		return false, false, 0, fmt.Errorf("lower the limit of %s: unexpected reply %v: %w", code, v, ErrBadState)
	}
	switch r[0] {
	case int64(0):
		return false, false, 0, nil
	case int64(-1):
		if len(r) == 3 {
			held, _ = r[2].(int64)
		}
		return true, true, held, nil
	}
	return true, false, 0, nil
}
