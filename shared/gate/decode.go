package gate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/flashgate/flashgate/shared/voucher"
)

// decodeReserve checks and decodes reserve.lua's reply for a batch of n items:
// {remaining, code1, ..., codeN}. Any other shape is an error, never a guess: a
// misread reply could admit an order that holds no use.
func decodeReserve(v any, n int) ([]Result, int64, error) {
	if n < 1 {
		return nil, 0, fmt.Errorf("decode reserve reply: batch of %d items", n)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, 0, fmt.Errorf("decode reserve reply: got %T, want array", v)
	}
	if len(arr) != n+1 {
		return nil, 0, fmt.Errorf("decode reserve reply: %d elements, want %d", len(arr), n+1)
	}
	remaining, ok := arr[0].(int64)
	if !ok {
		return nil, 0, fmt.Errorf("decode reserve reply: remaining is %T, want integer", arr[0])
	}
	res := make([]Result, n)
	notLoaded, reserved := 0, false
	for i, e := range arr[1:] {
		c, ok := e.(int64)
		if !ok {
			return nil, 0, fmt.Errorf("decode reserve reply: item %d is %T, want integer", i, e)
		}
		r := Result(c)
		if int64(r) != c || r < Reserved || r > TooSmall {
			return nil, 0, fmt.Errorf("decode reserve reply: item %d: unknown code %d", i, c)
		}
		switch r {
		case NotLoaded:
			notLoaded++
		case Reserved:
			reserved = true
		}
		res[i] = r
	}
	// The script answers NOT_LOADED for the whole batch or not at all.
	if notLoaded != 0 && (notLoaded != n || remaining != 0) {
		return nil, 0, fmt.Errorf("decode reserve reply: %d of %d items NOT_LOADED, remaining %d", notLoaded, n, remaining)
	}
	if reserved && remaining < 0 {
		return nil, 0, fmt.Errorf("decode reserve reply: reserved with remaining %d", remaining)
	}
	return res, remaining, nil
}

// decodeMeta decodes meta.lua's reply: {} or {remaining, 9 meta fields}, the
// voucher's terms without its code.
func decodeMeta(v any) (voucher.Voucher, int64, bool, error) {
	arr, ok := v.([]any)
	if !ok {
		return voucher.Voucher{}, 0, false, fmt.Errorf("decode meta reply: got %T, want array", v)
	}
	if len(arr) == 0 {
		return voucher.Voucher{}, 0, false, nil
	}
	if len(arr) != 10 {
		return voucher.Voucher{}, 0, false, fmt.Errorf("decode meta reply: %d elements, want 10", len(arr))
	}
	remaining, ok := arr[0].(int64)
	if !ok {
		return voucher.Voucher{}, 0, false, fmt.Errorf("decode meta reply: remaining is %T, want integer", arr[0])
	}
	names := [...]string{"discountAmount", "minOrderAmount", "totalLimit", "perUserLimit", "startsAt", "endsAt", "flashSale", "paused", "checkoutToken"}
	var f [9]int64
	for i := range f {
		s, ok := arr[i+1].(string)
		if !ok {
			return voucher.Voucher{}, 0, false, fmt.Errorf("decode meta reply: %s is %T, want string", names[i], arr[i+1])
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return voucher.Voucher{}, 0, false, fmt.Errorf("decode meta reply: %s: %w", names[i], err)
		}
		f[i] = n
	}
	if f[2] < 0 || f[2] > maxInt32 || f[3] < 1 || f[3] > maxInt32 || (f[6] != 0 && f[6] != 1) || (f[7] != 0 && f[7] != 1) || (f[8] != 0 && f[8] != 1) {
		return voucher.Voucher{}, 0, false, fmt.Errorf("decode meta reply: totalLimit %d, perUserLimit %d, flashSale %d, paused %d, checkoutToken %d",
			f[2], f[3], f[6], f[7], f[8])
	}
	m := voucher.Voucher{Terms: voucher.Terms{
		DiscountAmount: f[0],
		MinOrderAmount: f[1],
		TotalLimit:     int(f[2]),
		PerUserLimit:   int(f[3]),
		StartsAt:       fromMillis(f[4]),
		EndsAt:         fromMillis(f[5]),
		FlashSale:      f[6] == 1,
		Paused:         f[7] == 1,

		RequireCheckoutToken: f[8] == 1,
	}}
	return m, remaining, true, nil
}

const maxInt32 = 1<<31 - 1

// decodeState decodes state.lua's reply: {} or
// {remaining, nowMillis, {orderId, value, ...}, {finishedId, ...}}.
func decodeState(v any) (State, bool, error) {
	arr, ok := v.([]any)
	if !ok {
		return State{}, false, fmt.Errorf("decode state reply: got %T, want array", v)
	}
	if len(arr) == 0 {
		return State{}, false, nil
	}
	if len(arr) != 4 {
		return State{}, false, fmt.Errorf("decode state reply: %d elements, want 4", len(arr))
	}
	remaining, ok1 := arr[0].(int64)
	now, ok2 := arr[1].(int64)
	if !ok1 || !ok2 {
		return State{}, false, fmt.Errorf("decode state reply: header is %T, %T, want integers", arr[0], arr[1])
	}
	held, ok1 := arr[2].([]any)
	done, ok2 := arr[3].([]any)
	if !ok1 || !ok2 || len(held)%2 != 0 {
		return State{}, false, fmt.Errorf("decode state reply: orders %T, finished %T, want arrays of pairs and ids", arr[2], arr[3])
	}
	st := State{Remaining: remaining, Now: fromMillis(now), Orders: make([]Order, 0, len(held)/2), Finished: make([]string, 0, len(done))}
	for i := 0; i < len(held); i += 2 {
		id, ok1 := held[i].(string)
		val, ok2 := held[i+1].(string)
		if !ok1 || !ok2 {
			return State{}, false, fmt.Errorf("decode state reply: order is %T, %T, want strings", held[i], held[i+1])
		}
		o, err := parseOrder(id, val)
		if err != nil {
			return State{}, false, fmt.Errorf("decode state reply: %w", err)
		}
		st.Orders = append(st.Orders, o)
	}
	for _, e := range done {
		id, ok := e.(string)
		if !ok {
			return State{}, false, fmt.Errorf("decode state reply: finished id is %T, want string", e)
		}
		st.Finished = append(st.Finished, id)
	}
	slices.SortFunc(st.Orders, func(a, b Order) int { return strings.Compare(a.OrderID, b.OrderID) })
	slices.Sort(st.Finished)
	return st, true, nil
}

// parseOrder decodes an orders hash entry: orderId -> "customerId:admittedAtMillis".
func parseOrder(id, val string) (Order, error) {
	cust, at, ok := strings.Cut(val, ":")
	if !ok {
		return Order{}, fmt.Errorf("order %q: value %q is not customer:millis", id, val)
	}
	c, err := strconv.ParseInt(cust, 10, 64)
	if err != nil {
		return Order{}, fmt.Errorf("order %q: customer: %w", id, err)
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return Order{}, fmt.Errorf("order %q: admitted at: %w", id, err)
	}
	return Order{OrderID: id, CustomerID: c, AdmittedAt: fromMillis(ms)}, nil
}

// decodeReconcile decodes reconcile.lua's reply: {0} or
// {1, before, after, restored, termsChanged (0/1), releasedId...}.
func decodeReconcile(v any) (ReconcileResult, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return ReconcileResult{}, fmt.Errorf("decode reconcile reply: got %T %v, want non-empty array", v, v)
	}
	switch arr[0] {
	case int64(0):
		if len(arr) != 1 {
			return ReconcileResult{}, fmt.Errorf("decode reconcile reply: not loaded with %d elements", len(arr))
		}
		return ReconcileResult{}, nil
	case int64(1):
	default:
		return ReconcileResult{}, fmt.Errorf("decode reconcile reply: status %v (%T)", arr[0], arr[0])
	}
	if len(arr) < 5 {
		return ReconcileResult{}, fmt.Errorf("decode reconcile reply: %d elements, want at least 5", len(arr))
	}
	before, ok1 := arr[1].(int64)
	after, ok2 := arr[2].(int64)
	restored, ok3 := arr[3].(int64)
	changed, ok4 := arr[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || after < 0 || restored < 0 || (changed != 0 && changed != 1) {
		return ReconcileResult{}, fmt.Errorf("decode reconcile reply: header %v", arr[1:5])
	}
	res := ReconcileResult{
		Loaded:          true,
		RemainingBefore: before,
		RemainingAfter:  after,
		Restored:        int(restored),
		TermsChanged:    changed == 1,
		Released:        make([]string, 0, len(arr)-5),
	}
	for _, e := range arr[5:] {
		id, ok := e.(string)
		if !ok {
			return ReconcileResult{}, fmt.Errorf("decode reconcile reply: released id is %T, want string", e)
		}
		res.Released = append(res.Released, id)
	}
	slices.Sort(res.Released)
	return res, nil
}

// decodeUpdate decodes update.lua's reply: {0} (not loaded) or
// {1, remainingBefore, remainingAfter} with remainingAfter >= 0.
func decodeUpdate(v any) (UpdateResult, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return UpdateResult{}, fmt.Errorf("decode update reply: got %T %v, want non-empty array", v, v)
	}
	switch {
	case arr[0] == int64(0) && len(arr) == 1:
		return UpdateResult{}, nil
	case arr[0] != int64(1) || len(arr) != 3:
		return UpdateResult{}, fmt.Errorf("decode update reply: status %v with %d elements", arr[0], len(arr))
	}
	before, ok1 := arr[1].(int64)
	after, ok2 := arr[2].(int64)
	if !ok1 || !ok2 || after < 0 {
		return UpdateResult{}, fmt.Errorf("decode update reply: remaining %v -> %v", arr[1], arr[2])
	}
	return UpdateResult{Loaded: true, RemainingBefore: before, RemainingAfter: after}, nil
}

// scanPage is one reconcile_scan.lua reply.
type scanPage struct {
	loaded    bool
	remaining int64
	now       int64 // Redis's clock, unix millis
	cursor    string
	fields    []string // field1, value1, ...
}

// decodeScan decodes reconcile_scan.lua's reply: {0} or
// {1, remaining, nowMillis, nextCursor, {field1, value1, ...}}.
func decodeScan(v any) (scanPage, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return scanPage{}, fmt.Errorf("decode scan reply: got %T %v, want non-empty array", v, v)
	}
	if arr[0] == int64(0) && len(arr) == 1 {
		return scanPage{}, nil
	}
	if arr[0] != int64(1) || len(arr) != 5 {
		return scanPage{}, fmt.Errorf("decode scan reply: status %v with %d elements", arr[0], len(arr))
	}
	remaining, ok1 := arr[1].(int64)
	now, ok2 := arr[2].(int64)
	cursor, ok3 := arr[3].(string)
	fields, ok4 := arr[4].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || cursor == "" || len(fields)%2 != 0 {
		return scanPage{}, fmt.Errorf("decode scan reply: %v", arr[1:])
	}
	page := scanPage{loaded: true, remaining: remaining, now: now, cursor: cursor, fields: make([]string, len(fields))}
	for i, e := range fields {
		s, ok := e.(string)
		if !ok {
			return scanPage{}, fmt.Errorf("decode scan reply: field is %T, want string", e)
		}
		page.fields[i] = s
	}
	return page, nil
}

// decodeReconcileEnd decodes reconcile_end.lua's reply: {0} or
// {1, before, after, counterRepaired (0/1), termsChanged (0/1)}.
func decodeReconcileEnd(v any) (ReconcileDetail, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return ReconcileDetail{}, fmt.Errorf("decode reconcile end reply: got %T %v, want non-empty array", v, v)
	}
	switch {
	case arr[0] == int64(0) && len(arr) == 1:
		return ReconcileDetail{}, nil
	case arr[0] != int64(1) || len(arr) != 5:
		return ReconcileDetail{}, fmt.Errorf("decode reconcile end reply: status %v with %d elements", arr[0], len(arr))
	}
	before, ok1 := arr[1].(int64)
	after, ok2 := arr[2].(int64)
	counter, ok3 := arr[3].(int64)
	terms, ok4 := arr[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || after < 0 || (counter != 0 && counter != 1) || (terms != 0 && terms != 1) {
		return ReconcileDetail{}, fmt.Errorf("decode reconcile end reply: %v", arr[1:])
	}
	return ReconcileDetail{
		ReconcileResult: ReconcileResult{Loaded: true, RemainingBefore: before, RemainingAfter: after, TermsChanged: terms == 1},
		CounterRepaired: counter == 1,
	}, nil
}
