// Package gate is the Redis side of the flash-sale path: an admission filter that
// lets at most a voucher's remaining uses through to the database and turns the
// rest away in microseconds.
//
// Every operation on a voucher is one Lua script (the .lua files beside this one)
// over four keys that share the voucher's Redis Cluster hash slot, so each
// operation is atomic and the gate needs nothing but a redis.Scripter. Redis is not
// the money truth: Postgres guards the limits again, and Reconcile brings Redis
// back into line with it. Every ambiguity here resolves toward "slot held"
// (undersell for a while), never toward a second sale of the same use.
//
// The four keys carry the same TTL, so under a volatile-* maxmemory policy Redis
// could evict one of them alone; run this Redis with noeviction. A counter whose
// meta is gone makes Reserve fail loudly rather than admit without a per-user limit.
package gate

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed reserve.lua
	reserveLua string
	//go:embed release.lua
	releaseLua string
	//go:embed load.lua
	loadLua string
	//go:embed meta.lua
	metaLua string
	//go:embed state.lua
	stateLua string
	//go:embed reconcile.lua
	reconcileLua string
	//go:embed unload.lua
	unloadLua string
	//go:embed hold.lua
	holdLua string

	reserveScript   = redis.NewScript(reserveLua)
	releaseScript   = redis.NewScript(releaseLua)
	loadScript      = redis.NewScript(loadLua)
	metaScript      = redis.NewScript(metaLua)
	stateScript     = redis.NewScript(stateLua)
	reconcileScript = redis.NewScript(reconcileLua)
	unloadScript    = redis.NewScript(unloadLua)
	holdScript      = redis.NewScript(holdLua)
)

// Keys returns the Redis keys of one voucher, in the order the scripts expect
// them: remaining, users, orders, meta.
//
// The code sits inside {} as a Redis Cluster hash tag, so all four keys live in
// one slot and a script may touch them together. Keys trusts its caller to pass a
// validated code (^[A-Za-z0-9_-]{1,32}$), and that is what makes the keys safe: a
// code holding '{' or '}' would move the hash tag (splitting a voucher across
// slots), and one holding ':' could spell another voucher's key. The Gate methods
// check the code again before building keys, because a wrong key here cannot be
// noticed later.
func Keys(code string) []string {
	p := "voucher:{" + code + "}:"
	return []string{p + "remaining", p + "users", p + "orders", p + "meta"}
}

// validCode reports whether code matches ^[A-Za-z0-9_-]{1,32}$.
func validCode(code string) bool {
	if len(code) == 0 || len(code) > 32 {
		return false
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

func checkCode(code string) error {
	if !validCode(code) {
		return fmt.Errorf("gate: invalid voucher code %q", code)
	}
	return nil
}

// Result is the outcome of reserving one item. The values are the codes
// reserve.lua returns.
type Result int

// Reserve outcomes.
const (
	Reserved      Result = iota + 1 // a use was taken for this order
	Duplicate                       // this order already holds a use (a retry): success
	OutOfStock                      // no use left
	AlreadyUsed                     // the customer holds perUserLimit uses already
	NotLoaded                       // the voucher is not in Redis: warm it up and retry
	OrderConflict                   // the order id holds a use for another customer
)

var resultNames = [...]string{
	Reserved:      "RESERVED",
	Duplicate:     "DUPLICATE",
	OutOfStock:    "OUT_OF_STOCK",
	AlreadyUsed:   "ALREADY_USED",
	NotLoaded:     "NOT_LOADED",
	OrderConflict: "ORDER_CONFLICT",
}

// String returns the result's wire name, such as "OUT_OF_STOCK".
func (r Result) String() string {
	if r >= Reserved && r <= OrderConflict {
		return resultNames[r]
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// Admitted reports whether the order holds a use: Reserved, or Duplicate for a
// retry of an order that was reserved before.
func (r Result) Admitted() bool { return r == Reserved || r == Duplicate }

// Item is one order asking for one use of a voucher.
type Item struct {
	CustomerID int64
	OrderID    string
}

// Meta is what the gate caches about a voucher: what the proxy needs for
// eligibility, and the limits the scripts enforce.
type Meta struct {
	DiscountAmount, MinOrderAmount int64
	TotalLimit, PerUserLimit       int
	StartsAt, EndsAt               time.Time
	FlashSale                      bool
}

// Order is one admitted order. AdmittedAt is Redis's clock at admission.
type Order struct {
	OrderID    string
	CustomerID int64
	AdmittedAt time.Time
}

// Snapshot is what Load copies from the database: the voucher, its remaining
// uses and the active reservations. Orders must hold every reservation that
// holds a use (reserved or confirmed); a zero AdmittedAt means "now" by Redis's
// clock.
type Snapshot struct {
	Meta      Meta
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

// ReconcileResult reports what Reconcile changed.
type ReconcileResult struct {
	Loaded                          bool
	RemainingBefore, RemainingAfter int64
	Released                        []string // hanging orders removed, sorted
	Restored                        int      // database orders added back
}

// Gate runs the voucher scripts. It is safe for concurrent use.
type Gate struct {
	rdb   redis.Scripter
	calls atomic.Int64
}

// New returns a Gate over rdb, typically a *redis.Client or *redis.ClusterClient.
func New(rdb redis.Scripter) *Gate {
	return &Gate{rdb: rdb}
}

// Calls returns how many script calls this Gate has made, failed ones included.
func (g *Gate) Calls() int64 { return g.calls.Load() }

// run counts and runs one script: EVALSHA, then EVAL if Redis lost its script
// cache (a restart or SCRIPT FLUSH).
func (g *Gate) run(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	g.calls.Add(1)
	return s.Run(ctx, g.rdb, keys, args...).Result()
}

// runRO is run for read-only scripts (EVALSHA_RO), which a replica may serve.
func (g *Gate) runRO(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	g.calls.Add(1)
	return s.RunRO(ctx, g.rdb, keys, args...).Result()
}

// Reserve tries to take one use per item, in order, in a single script call, with
// the same outcome as reserving the items one by one. All items must be for the
// voucher code. It returns one Result per item and the remaining count after the
// batch (0 when the voucher is not loaded). An empty batch makes no call and
// returns (nil, 0, nil); that 0 says nothing about stock. A counter without its
// meta (set by hand, or evicted apart) is an error and changes nothing.
func (g *Gate) Reserve(ctx context.Context, code string, items []Item) ([]Result, int64, error) {
	if len(items) == 0 {
		return nil, 0, nil
	}
	if err := checkCode(code); err != nil {
		return nil, 0, err
	}
	args := make([]any, 0, 2*len(items))
	for _, it := range items {
		args = append(args, strconv.FormatInt(it.CustomerID, 10), it.OrderID)
	}
	v, err := g.run(ctx, reserveScript, Keys(code), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("reserve %s: %w", code, err)
	}
	res, remaining, err := decodeReserve(v, len(items))
	if err != nil {
		return nil, 0, fmt.Errorf("reserve %s: %w", code, err)
	}
	return res, remaining, nil
}

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
		if int64(r) != c || r < Reserved || r > OrderConflict {
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

// Release gives back the use of each order recorded in Redis and returns how
// many it released. It is idempotent: an order released before, or never
// admitted, is ignored. It never creates the counter of a voucher that is not
// loaded. No ids makes no call.
func (g *Gate) Release(ctx context.Context, code string, orderIDs ...string) (int, error) {
	return g.release(ctx, code, true, orderIDs)
}

// Drop forgets orders like Release but does not give their uses back to
// remaining. It is for admissions the database refused as out of stock: Redis
// counted a use that does not exist, and dropping it brings Redis's count down
// to the database's instead of admitting the next request into the same refusal.
func (g *Gate) Drop(ctx context.Context, code string, orderIDs ...string) (int, error) {
	return g.release(ctx, code, false, orderIDs)
}

func (g *Gate) release(ctx context.Context, code string, restock bool, orderIDs []string) (int, error) {
	if len(orderIDs) == 0 {
		return 0, nil
	}
	if err := checkCode(code); err != nil {
		return 0, err
	}
	keys := Keys(code)
	args := make([]any, 0, len(orderIDs)+1)
	args = append(args, flag(restock))
	for _, id := range orderIDs {
		args = append(args, id)
	}
	v, err := g.run(ctx, releaseScript, keys[:3], args...)
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", code, err)
	}
	n, ok := v.(int64)
	if !ok || n < 0 || n > int64(len(orderIDs)) {
		return 0, fmt.Errorf("release %s: unexpected reply %v (%T)", code, v, v)
	}
	return int(n), nil
}

// Hold makes Redis hold a use for an order that holds one in the database,
// if Redis does not already. It reports whether it recorded the order. An
// order recorded for another customer is left for the reconciler.
func (g *Gate) Hold(ctx context.Context, code, orderID string, customerID int64) (bool, error) {
	if err := checkCode(code); err != nil {
		return false, err
	}
	v, err := g.run(ctx, holdScript, Keys(code)[:3], orderID, customerID)
	if err != nil {
		return false, fmt.Errorf("hold %s/%s: %w", code, orderID, err)
	}
	n, ok := v.(int64)
	if !ok || n < -1 || n > 1 {
		return false, fmt.Errorf("hold %s/%s: unexpected reply %v (%T)", code, orderID, v, v)
	}
	return n == 1, nil
}

// Load copies snap into Redis (remaining, users counted from the orders, orders,
// meta) in one atomic step, only if the voucher's counter does not exist: a live
// counter is never overwritten. It reports whether it loaded. All four keys
// expire at Meta.EndsAt + 24h. A snapshot whose counter exceeds
// TotalLimit minus its orders is refused, as it could oversell.
func (g *Gate) Load(ctx context.Context, code string, snap Snapshot) (bool, error) {
	if err := checkCode(code); err != nil {
		return false, err
	}
	m := snap.Meta
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

// Meta reads the cached meta and remaining count of a voucher; ok is false when
// the voucher is not loaded.
func (g *Gate) Meta(ctx context.Context, code string) (m Meta, remaining int64, ok bool, err error) {
	if err := checkCode(code); err != nil {
		return Meta{}, 0, false, err
	}
	keys := Keys(code)
	v, err := g.runRO(ctx, metaScript, []string{keys[0], keys[3]})
	if err != nil {
		return Meta{}, 0, false, fmt.Errorf("meta %s: %w", code, err)
	}
	m, remaining, ok, err = decodeMeta(v)
	if err != nil {
		return Meta{}, 0, false, fmt.Errorf("meta %s: %w", code, err)
	}
	return m, remaining, ok, nil
}

// decodeMeta decodes meta.lua's reply: {} or {remaining, 7 meta fields}.
func decodeMeta(v any) (Meta, int64, bool, error) {
	arr, ok := v.([]any)
	if !ok {
		return Meta{}, 0, false, fmt.Errorf("decode meta reply: got %T, want array", v)
	}
	if len(arr) == 0 {
		return Meta{}, 0, false, nil
	}
	if len(arr) != 8 {
		return Meta{}, 0, false, fmt.Errorf("decode meta reply: %d elements, want 8", len(arr))
	}
	remaining, ok := arr[0].(int64)
	if !ok {
		return Meta{}, 0, false, fmt.Errorf("decode meta reply: remaining is %T, want integer", arr[0])
	}
	names := [...]string{"discountAmount", "minOrderAmount", "totalLimit", "perUserLimit", "startsAt", "endsAt", "flashSale"}
	var f [7]int64
	for i := range f {
		s, ok := arr[i+1].(string)
		if !ok {
			return Meta{}, 0, false, fmt.Errorf("decode meta reply: %s is %T, want string", names[i], arr[i+1])
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Meta{}, 0, false, fmt.Errorf("decode meta reply: %s: %w", names[i], err)
		}
		f[i] = n
	}
	if f[2] < 0 || f[2] > maxInt32 || f[3] < 1 || f[3] > maxInt32 || (f[6] != 0 && f[6] != 1) {
		return Meta{}, 0, false, fmt.Errorf("decode meta reply: totalLimit %d, perUserLimit %d, flashSale %d", f[2], f[3], f[6])
	}
	m := Meta{
		DiscountAmount: f[0],
		MinOrderAmount: f[1],
		TotalLimit:     int(f[2]),
		PerUserLimit:   int(f[3]),
		StartsAt:       fromMillis(f[4]),
		EndsAt:         fromMillis(f[5]),
		FlashSale:      f[6] == 1,
	}
	return m, remaining, true, nil
}

const maxInt32 = 1<<31 - 1

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

// decodeState decodes state.lua's reply: {} or {remaining, nowMillis, id, value, ...}.
func decodeState(v any) (State, bool, error) {
	arr, ok := v.([]any)
	if !ok {
		return State{}, false, fmt.Errorf("decode state reply: got %T, want array", v)
	}
	if len(arr) == 0 {
		return State{}, false, nil
	}
	if len(arr) < 2 || len(arr)%2 != 0 {
		return State{}, false, fmt.Errorf("decode state reply: %d elements", len(arr))
	}
	remaining, ok1 := arr[0].(int64)
	now, ok2 := arr[1].(int64)
	if !ok1 || !ok2 {
		return State{}, false, fmt.Errorf("decode state reply: header is %T, %T, want integers", arr[0], arr[1])
	}
	st := State{Remaining: remaining, Now: fromMillis(now), Orders: make([]Order, 0, (len(arr)-2)/2)}
	for i := 2; i < len(arr); i += 2 {
		id, ok1 := arr[i].(string)
		val, ok2 := arr[i+1].(string)
		if !ok1 || !ok2 {
			return State{}, false, fmt.Errorf("decode state reply: order is %T, %T, want strings", arr[i], arr[i+1])
		}
		o, err := parseOrder(id, val)
		if err != nil {
			return State{}, false, fmt.Errorf("decode state reply: %w", err)
		}
		st.Orders = append(st.Orders, o)
	}
	slices.SortFunc(st.Orders, func(a, b Order) int { return strings.Compare(a.OrderID, b.OrderID) })
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

// decodeReconcile decodes reconcile.lua's reply: {0} or
// {1, before, after, restored, releasedId...}.
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
	if len(arr) < 4 {
		return ReconcileResult{}, fmt.Errorf("decode reconcile reply: %d elements, want at least 4", len(arr))
	}
	before, ok1 := arr[1].(int64)
	after, ok2 := arr[2].(int64)
	restored, ok3 := arr[3].(int64)
	if !ok1 || !ok2 || !ok3 || after < 0 || restored < 0 {
		return ReconcileResult{}, fmt.Errorf("decode reconcile reply: header %v", arr[1:4])
	}
	res := ReconcileResult{
		Loaded:          true,
		RemainingBefore: before,
		RemainingAfter:  after,
		Restored:        int(restored),
		Released:        make([]string, 0, len(arr)-4),
	}
	for _, e := range arr[4:] {
		id, ok := e.(string)
		if !ok {
			return ReconcileResult{}, fmt.Errorf("decode reconcile reply: released id is %T, want string", e)
		}
		res.Released = append(res.Released, id)
	}
	slices.Sort(res.Released)
	return res, nil
}

// Unload deletes the voucher's four keys (admin and tests).
func (g *Gate) Unload(ctx context.Context, code string) error {
	if err := checkCode(code); err != nil {
		return err
	}
	if _, err := g.run(ctx, unloadScript, Keys(code)); err != nil {
		return fmt.Errorf("unload %s: %w", code, err)
	}
	return nil
}

// millis encodes a time for the scripts: unix millis, "0" for the zero time.
func millis(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// fromMillis is the inverse of millis, in UTC.
func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
