// Package gate is the Redis side of the flash-sale path: an admission filter that
// lets at most a voucher's remaining uses through to the database and turns the
// rest away in microseconds.
//
// Every operation on a voucher is one Lua script (the .lua files beside this one)
// over five keys that share the voucher's Redis Cluster hash slot, so each
// operation is atomic and the gate needs nothing but a redis.Scripter. Redis is not
// the money truth: Postgres guards the limits again, and Reconcile brings Redis
// back into line with it, in bounded steps (each one script) rather than one
// script over every order, so that Redis serves the crowd meanwhile. Every ambiguity here resolves toward "slot held"
// (undersell for a while), never toward a second sale of the same use.
//
// The five keys carry the same TTL, so under a volatile-* maxmemory policy Redis
// could evict one of them alone; run this Redis with noeviction. A counter whose
// meta is gone makes Reserve fail loudly rather than admit without a per-user limit.
package gate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/voucher"
)

var (
	//go:embed prelude.lua
	preludeLua string
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
	//go:embed reconcile_scan.lua
	reconcileScanLua string
	//go:embed reconcile_end.lua
	reconcileEndLua string
	//go:embed unload.lua
	unloadLua string
	//go:embed hold.lua
	holdLua string
	//go:embed update.lua
	updateLua string
	//go:embed reassert.lua
	reassertLua string
	//go:embed generation.lua
	generationLua string
	//go:embed fingerprint.lua
	fingerprintLua string
	//go:embed holder.lua
	holderLua string
	//go:embed clock.lua
	clockLua string

	reserveScript       = newScript(reserveLua)
	releaseScript       = newScript(releaseLua)
	loadScript          = newScript(loadLua)
	metaScript          = newScript(metaLua)
	stateScript         = newScript(stateLua)
	reconcileScript     = newScript(reconcileLua)
	reconcileScanScript = newScript(reconcileScanLua)
	reconcileEndScript  = newScript(reconcileEndLua)
	unloadScript        = newScript(unloadLua)
	holdScript          = newScript(holdLua)
	updateScript        = newScript(updateLua)
	reassertScript      = newScript(reassertLua)
	generationScript    = newScript(generationLua)
	fingerprintScr      = newScript(fingerprintLua)
	holderScript        = newScript(holderLua)
	clockScript         = newScript(clockLua)
)

// newScript puts prelude.lua's shared opening after the script's #! line (which
// must stay first: it carries the script's flags) and before its own header.
func newScript(src string) *redis.Script {
	shebang, body, _ := strings.Cut(src, "\n")
	return redis.NewScript(shebang + "\n" + preludeLua + body)
}

// Keys returns the Redis keys of one voucher, in the order every script takes
// them: remaining, users, orders, meta, done. done is a hash orderId ->
// customerId of the orders whose database row gave its use back (released,
// expired, refunded), so a retry of one is sent to the ledger to answer.
//
// The code sits inside {} as a Redis Cluster hash tag, so all five keys live in
// one slot and a script may touch them together. Keys trusts its caller to pass a
// validated code (^[A-Za-z0-9_-]{1,32}$), and that is what makes the keys safe: a
// code holding '{' or '}' would move the hash tag (splitting a voucher across
// slots), and one holding ':' could spell another voucher's key. The Gate methods
// check the code again before building keys, because a wrong key here cannot be
// noticed later.
func Keys(code string) []string {
	p := "voucher:{" + code + "}:"
	return []string{p + "remaining", p + "users", p + "orders", p + "meta", p + "done"}
}

func checkCode(code string) error {
	if !voucher.ValidCode(code) {
		return fmt.Errorf("gate: invalid voucher code %q", code)
	}
	return nil
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

// readOnly runs the read-only script s on code's keys (args after them),
// after checking code; a failure is named by what and code. runRO is run for
// read-only scripts (EVALSHA_RO), which a replica may serve.
func (g *Gate) readOnly(ctx context.Context, s *redis.Script, code, what string, args ...any) (any, error) {
	if err := checkCode(code); err != nil {
		return nil, err
	}
	v, err := g.runRO(ctx, s, Keys(code), args...)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, code, err)
	}
	return v, nil
}

func (g *Gate) runRO(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	g.calls.Add(1)
	return s.RunRO(ctx, g.rdb, keys, args...).Result()
}

// Reserve tries to take one use per item, in order, in a single script call, with
// the same outcome as reserving the items one by one. All items must be for the
// voucher code. Per item, the order's own state comes first (held: Duplicate or
// OrderConflict; finished: Finished), then the voucher's (Paused, NotStarted,
// Ended by Redis's clock, TooSmall), then the limits (AlreadyUsed, OutOfStock). It returns one Result per item and the remaining count after the
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
	args := make([]any, 0, 3*len(items))
	for _, it := range items {
		args = append(args, strconv.FormatInt(it.CustomerID, 10), it.OrderID, strconv.FormatInt(it.OrderAmount, 10))
	}
	v, err := g.run(ctx, reserveScript, Keys(code), args...)
	if err != nil {
		if scriptRefused(err) {
			return nil, 0, fmt.Errorf("reserve %s: %w: %w", code, err, ErrBadState)
		}
		return nil, 0, fmt.Errorf("reserve %s: %w", code, err)
	}
	res, remaining, err := decodeReserve(v, len(items))
	if err != nil {
		return nil, 0, fmt.Errorf("reserve %s: %w: %w", code, err, ErrBadState)
	}
	return res, remaining, nil
}

// ErrBadState marks an error that Redis answered about one voucher's data: the
// script refused it (a counter that is not a number, a meta without a field)
// or its reply could not be read. Redis itself is up, so it is no reason to
// stop asking Redis about other vouchers (the proxy's circuit breaker counts
// it as an answer); the request still fails, and the reconciler or a reload
// repairs the voucher.
var ErrBadState = errors.New("the voucher's redis state is malformed")

// scriptRefused reports whether err is the reserve script's own error reply,
// or a Lua error while it ran (on data it did not expect), as opposed to a
// Redis that is down, loading, read-only or out of memory.
func scriptRefused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "ERR reserve:") || strings.Contains(msg, "user_script") ||
		strings.HasPrefix(msg, "ERR Error running script")
}

// How release.lua treats the orders it is given.
const (
	modeRelease  = "release"  // give the use back, record the order in done
	modeGiveBack = "giveback" // give the use back only
	modeDrop     = "drop"     // forget the order only
)

// Release gives back the use of each order recorded in Redis, records it in
// done (so a retry is sent to the ledger, which answers from the row) and
// returns how many it released. It is for orders whose database row gave its
// use back: a cancel, an expiry, a refund. It is idempotent: an order released
// before, or never admitted, is ignored. It never creates the counter of a
// voucher that is not loaded. No ids makes no call.
func (g *Gate) Release(ctx context.Context, code string, orderIDs ...string) (int, error) {
	return g.release(ctx, code, modeRelease, orderIDs)
}

// GiveBack is Release without the record in done: for admissions that have no
// database row (a failed write), whose retry may be admitted again.
func (g *Gate) GiveBack(ctx context.Context, code string, orderIDs ...string) (int, error) {
	return g.release(ctx, code, modeGiveBack, orderIDs)
}

// Drop forgets orders like GiveBack but does not give their uses back to
// remaining. It is for admissions the database refused as out of stock: Redis
// counted a use that does not exist, and dropping it brings Redis's count down
// to the database's instead of admitting the next request into the same refusal.
func (g *Gate) Drop(ctx context.Context, code string, orderIDs ...string) (int, error) {
	return g.release(ctx, code, modeDrop, orderIDs)
}

func (g *Gate) release(ctx context.Context, code, mode string, orderIDs []string) (int, error) {
	if len(orderIDs) == 0 {
		return 0, nil
	}
	if err := checkCode(code); err != nil {
		return 0, err
	}
	args := make([]any, 0, len(orderIDs)+1)
	args = append(args, mode)
	for _, id := range orderIDs {
		args = append(args, id)
	}
	v, err := g.run(ctx, releaseScript, loggedKeys(code), args...)
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
// if Redis does not already, and removes it from done. It reports whether it
// recorded the order. An order recorded for another customer is left for the
// reconciler.
func (g *Gate) Hold(ctx context.Context, code, orderID string, customerID int64) (bool, error) {
	if err := checkCode(code); err != nil {
		return false, err
	}
	v, err := g.run(ctx, holdScript, Keys(code), orderID, customerID)
	if err != nil {
		return false, fmt.Errorf("hold %s/%s: %w", code, orderID, err)
	}
	n, ok := v.(int64)
	if !ok || n < -1 || n > 1 {
		return false, fmt.Errorf("hold %s/%s: unexpected reply %v (%T)", code, orderID, v, v)
	}
	return n == 1, nil
}

// Take takes a use in Redis for orderID of customerID before the database
// does: a late confirmation of a writePath log voucher, whose database does
// not count the uses promised by records still in the admissions log, so that
// the database alone would hand out a use already promised. It answers
// Reserved (taken), Duplicate (the order holds a use for this customer
// already), OrderConflict (for another customer), OutOfStock, AlreadyUsed
// (the customer holds perUserLimit uses) or NotLoaded. Pause, window and
// minimum do not apply: the order was placed before.
func (g *Gate) Take(ctx context.Context, code, orderID string, customerID int64) (Result, error) {
	if err := checkCode(code); err != nil {
		return 0, err
	}
	v, err := g.run(ctx, holdScript, Keys(code), orderID, customerID, "take")
	if err != nil {
		if scriptRefused(err) {
			return 0, fmt.Errorf("take %s/%s: %w: %w", code, orderID, err, ErrBadState)
		}
		return 0, fmt.Errorf("take %s/%s: %w", code, orderID, err)
	}
	n, _ := v.(int64)
	switch n {
	case 1:
		return Reserved, nil
	case 0:
		return Duplicate, nil
	case -1:
		return OrderConflict, nil
	case -2:
		return OutOfStock, nil
	case -3:
		return AlreadyUsed, nil
	case -4:
		return NotLoaded, nil
	}
	return 0, fmt.Errorf("take %s/%s: unexpected reply %v (%T): %w", code, orderID, v, v, ErrBadState)
}

// Holder returns the customer an order holds a use for in Redis, held false
// when it holds none (or the voucher is not loaded): a retry of a held order
// takes no new use, whatever the stock.
func (g *Gate) Holder(ctx context.Context, code, orderID string) (customerID int64, held bool, err error) {
	if err := checkCode(code); err != nil {
		return 0, false, err
	}
	v, err := g.runRO(ctx, holderScript, Keys(code), orderID)
	if err != nil {
		return 0, false, fmt.Errorf("holder %s/%s: %w", code, orderID, err)
	}
	n, ok := v.(int64)
	if !ok || n < 0 {
		return 0, false, fmt.Errorf("holder %s/%s: unexpected reply %v (%T)", code, orderID, v, v)
	}
	return n, n > 0, nil
}

// Unload deletes the voucher's five keys (admin and tests).
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
