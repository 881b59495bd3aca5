package gate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// ReconcileResult reports what Reconcile changed.
type ReconcileResult struct {
	Loaded                          bool
	RemainingBefore, RemainingAfter int64
	Released                        []string // hanging orders removed, sorted
	Restored                        int      // database orders added back
	// Restoring: the database's orders the pass sent to be added back
	// (absent from Redis's orders when scanned), sorted; Restored counts
	// those it added.
	Restoring    []string
	TermsChanged bool // meta differed from the voucher's terms and was rewritten
}

// ReconcileDetail is a ReconcileResult with what the pass found wrong in the
// counter itself, which the result's numbers cannot tell apart from the
// admissions the crowd made during the pass.
type ReconcileDetail struct {
	ReconcileResult
	// CounterRepaired: remaining disagreed with the orders Redis held (a
	// counter that drifted or was set by hand, a total limit changed without
	// its Update) and was set right.
	CounterRepaired bool
}

// reconcileSizes bound each script call of a reconcile: the fields one HSCAN
// page asks for and the orders one repair step is given. Redis serves nothing
// else while a script runs; at these sizes a call takes well under 2 ms
// however many orders the voucher holds (BenchmarkReconcile).
var reconcileSizes = stepSizes{page: 200, step: 100}

// stepSizes are a reconcile's bounds (tests take small ones).
type stepSizes struct {
	page int // COUNT of one HSCAN page
	step int // orders given to one repair step
}

// Reconcile makes Redis agree with dbActive, the database's active reservations
// of the voucher (every reservation holding a use), in steps that each block
// Redis for a bounded time, while the proxies keep reserving between them:
// Redis-only orders admitted longer than grace ago (by Redis's clock) are
// released, younger ones are kept because their database write may still be in
// flight; database orders missing from Redis are added with admission time now
// (and leave done); an order Redis holds for another customer than the
// database is moved to the database's; users follows each order moved; meta is
// rewritten from v, the voucher's current terms, and the keys expire at
// v.EndsAt + 24h; remaining becomes max(0, v.TotalLimit - orders), counted in
// the last step, one small script, so admissions made between the steps are in
// it. v's limits, never the loaded ones, decide: a change whose Update was lost
// is applied here. RemainingBefore is remaining when the pass began.
//
// The steps: HSCAN pages of orders (and of done), each Redis-only or
// wrong-customer order sent to a repair step; then the database orders the
// scan did not see, in steps; the last step (reconcile_end.lua) sets remaining
// and rewrites the terms. Every repair reads
// the order as it is at that step and is idempotent, so an order the scan
// showed twice, or one released or admitted between the steps, is repaired
// once or left alone. Between the steps remaining is never raised: a freed
// order's use comes back only in the last step, a restored one takes its use
// at once. Nor does the last step raise it above v.TotalLimit - len(dbActive):
// an order of dbActive released after the scan saw it (the database first,
// then Redis) leaves Redis holding fewer orders than dbActive, and the use it
// gave back waits for the next pass, whose dbActive no longer has the order
// (meta's reconcileHeld keeps the count, so that pass does not take it for a
// drifted counter).
//
// users is kept per order, not rebuilt: each freed, restored or moved order
// moves its customer's count by one. A rebuild needs every order read in one
// atomic step, which is what the steps avoid; and Redis saves, replicates and
// reloads each script's writes together, so a state Redis lost data in (an
// older snapshot, a failover) still has users agreeing with its orders.
//
// Read dbActive before calling: a reservation released in between comes back
// (a slot held until the next round), never the other way round, as long as grace
// exceeds the longest admitted write plus the time between reading dbActive and
// this call (Reconcile reads Redis's clock when called, and frees only holds
// admitted grace before that, however long the pass then takes; a caller that
// reads Clock before dbActive passes it to ReconcileDetailed, and the read's
// own time no longer counts either). A voucher that is not loaded is left alone (Loaded is false);
// one that stops being loaded during the pass reports Loaded false too, and
// keeps what the steps before did.
func (g *Gate) Reconcile(ctx context.Context, code string, v voucher.Voucher, dbActive []Order, grace time.Duration) (ReconcileResult, error) {
	d, err := g.reconcile(ctx, code, v, dbActive, 0, grace, reconcileSizes)
	return d.ReconcileResult, err
}

// ReconcileDetailed is Reconcile that also reports whether the counter itself
// was wrong. readAt is Redis's clock (Clock) read before dbActive was: a hold
// with no row is freed only if it was older than grace at readAt, however long
// the read and the pass take (a Redis pause, a slow machine); 0 reads the
// clock at the call, as Reconcile does.
func (g *Gate) ReconcileDetailed(ctx context.Context, code string, v voucher.Voucher, dbActive []Order, readAt int64, grace time.Duration) (ReconcileDetail, error) {
	return g.reconcile(ctx, code, v, dbActive, readAt, grace, reconcileSizes)
}

// Clock returns Redis's clock on code's node, in unix millis: what a
// reconcile reads before the database (ReconcileDetailed's readAt).
func (g *Gate) Clock(ctx context.Context, code string) (int64, error) {
	reply, err := g.readOnly(ctx, clockScript, code, "redis clock for")
	if err != nil {
		return 0, err
	}
	ms, ok := reply.(int64)
	if !ok {
		return 0, fmt.Errorf("redis clock for %s: unexpected reply %v", code, reply)
	}
	return ms, nil
}

// reconcile is ReconcileDetailed in steps of the given sizes.
func (g *Gate) reconcile(ctx context.Context, code string, v voucher.Voucher, dbActive []Order, readAt int64, grace time.Duration, sizes stepSizes) (ReconcileDetail, error) {
	if err := checkCode(code); err != nil {
		return ReconcileDetail{}, err
	}
	if grace < 0 {
		return ReconcileDetail{}, fmt.Errorf("reconcile %s: negative grace %s", code, grace)
	}
	if readAt == 0 {
		var err error
		if readAt, err = g.Clock(ctx, code); err != nil {
			return ReconcileDetail{}, fmt.Errorf("reconcile %s: %w", code, err)
		}
	}
	if err := checkTerms(v); err != nil {
		return ReconcileDetail{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	db, err := uniqueOrders(dbActive)
	if err != nil {
		return ReconcileDetail{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	p := &reconcilePass{g: g, keys: reconcileKeys(code), db: db, sizes: sizes, terms: termsArgs(v),
		cutoff: readAt - grace.Milliseconds(), res: ReconcileDetail{ReconcileResult: ReconcileResult{Loaded: true, Released: []string{}}}}
	res, err := p.run(ctx, dbActive)
	if err != nil {
		return ReconcileDetail{}, fmt.Errorf("reconcile %s: %w", code, err)
	}
	return res, nil
}

// reconcilePass is one Reconcile: what it has sent and what the steps did.
type reconcilePass struct {
	g      *Gate
	keys   []string
	terms  []any // the terms block, for the last step
	db     map[string]int64
	sizes  stepSizes
	cutoff int64 // Redis millis: a hold with no row admitted before it is freed

	sent    map[string]bool // orders seen in Redis's orders, or sent to a step
	pending []any           // orderId, customer pairs for the next step
	res     ReconcileDetail
	owed    int64 // uses the steps left out of remaining (reconcile_end.lua's ARGV[1])
}

func (p *reconcilePass) run(ctx context.Context, dbActive []Order) (ReconcileDetail, error) {
	p.sent = make(map[string]bool, len(p.db))
	loaded, err := p.scan(ctx, "orders", func(_ int64, order, value string) error {
		p.sent[order] = true
		customer, inDB := p.db[order]
		switch {
		case !inDB && young(value, p.cutoff):
			// The crowd's admissions made during the pass: not sent to a step,
			// which would keep them as well.
			return nil
		case !inDB:
			return p.add(ctx, order, "")
		case customerText(value) != strconv.FormatInt(customer, 10):
			return p.add(ctx, order, strconv.FormatInt(customer, 10))
		}
		return nil
	})
	if err != nil || !loaded {
		return ReconcileDetail{}, err
	}
	// A database order recorded as finished leaves done: in the same step it
	// is restored if the orders' scan did not see it.
	loaded, err = p.scan(ctx, "done", func(_ int64, order, _ string) error {
		if customer, inDB := p.db[order]; inDB && !p.sent[order] {
			p.sent[order] = true
			p.res.Restoring = append(p.res.Restoring, order)
			return p.add(ctx, order, strconv.FormatInt(customer, 10))
		}
		return nil
	})
	if err != nil || !loaded {
		return ReconcileDetail{}, err
	}
	for _, o := range dbActive {
		if !p.sent[o.OrderID] {
			p.sent[o.OrderID] = true
			p.res.Restoring = append(p.res.Restoring, o.OrderID)
			if err := p.add(ctx, o.OrderID, strconv.FormatInt(o.CustomerID, 10)); err != nil {
				return ReconcileDetail{}, err
			}
		}
	}
	if err := p.flush(ctx); err != nil || !p.res.Loaded {
		return ReconcileDetail{}, err
	}
	if err := p.end(ctx); err != nil || !p.res.Loaded {
		return ReconcileDetail{}, err
	}
	slices.Sort(p.res.Released)
	slices.Sort(p.res.Restoring)
	return p.res, nil
}

// scan visits every field of the voucher's orders or done hash, a page per
// script call; the pass's first page gives RemainingBefore. It reports false
// when the voucher is not loaded (or stopped being loaded).
func (p *reconcilePass) scan(ctx context.Context, hash string, visit func(now int64, field, value string) error) (bool, error) {
	cursor := "0"
	for first := hash == "orders"; ; first = false {
		reply, err := p.g.runRO(ctx, reconcileScanScript, p.keys, hash, cursor, p.sizes.page)
		if err != nil {
			return false, fmt.Errorf("scan %s: %w", hash, err)
		}
		page, err := decodeScan(reply)
		if err != nil {
			return false, fmt.Errorf("scan %s: %w", hash, err)
		}
		if !page.loaded {
			return false, nil
		}
		if first {
			p.res.RemainingBefore = page.remaining
		}
		for i := 0; i < len(page.fields); i += 2 {
			if err := visit(page.now, page.fields[i], page.fields[i+1]); err != nil {
				return false, err
			}
			if !p.res.Loaded {
				return false, nil
			}
		}
		if cursor = page.cursor; cursor == "0" {
			return true, nil
		}
	}
}

// add queues an order for a repair step, and runs the step once it is full.
func (p *reconcilePass) add(ctx context.Context, order, customer string) error {
	p.pending = append(p.pending, order, customer)
	if len(p.pending) < 2*p.sizes.step {
		return nil
	}
	return p.flush(ctx)
}

// flush runs one repair step over the queued orders, if any. A step that
// finds the voucher not loaded sets res.Loaded to false.
func (p *reconcilePass) flush(ctx context.Context) error {
	if len(p.pending) == 0 {
		return nil
	}
	args := make([]any, 0, 1+len(p.pending))
	args = append(append(args, strconv.FormatInt(p.cutoff, 10)), p.pending...)
	p.pending = p.pending[:0]
	reply, err := p.g.run(ctx, reconcileScript, p.keys, args...)
	if err != nil {
		return err
	}
	st, err := decodeReconcile(reply)
	if err != nil {
		return err
	}
	if !st.Loaded {
		p.res.Loaded = false
		return nil
	}
	p.res.Released = append(p.res.Released, st.Released...)
	p.res.Restored += st.Restored
	// A freed order's use is owed to remaining; a restored one took its use,
	// unless remaining was at 0 already (before - after counts those it took).
	p.owed += int64(len(st.Released)) - int64(st.Restored) + (st.RemainingBefore - st.RemainingAfter)
	return nil
}

// end runs reconcile_end.lua: remaining from the orders held, the terms.
func (p *reconcilePass) end(ctx context.Context) error {
	args := append([]any{strconv.FormatInt(p.owed, 10), len(p.db)}, p.terms...)
	reply, err := p.g.run(ctx, reconcileEndScript, p.keys, args...)
	if err != nil {
		return err
	}
	e, err := decodeReconcileEnd(reply)
	if err != nil {
		return err
	}
	if !e.Loaded {
		p.res.Loaded = false
		return nil
	}
	p.res.RemainingAfter, p.res.TermsChanged, p.res.CounterRepaired = e.RemainingAfter, e.TermsChanged, e.CounterRepaired
	return nil
}

// young reports whether an orders value "customerId:millis" was admitted at
// or after cutoff, as reconcile.lua judges it; an unreadable time is old.
func young(value string, cutoff int64) bool {
	i := strings.LastIndexByte(value, ':')
	digits := value[i+1:]
	if i < 0 || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	at, err := strconv.ParseInt(digits, 10, 64)
	return err == nil && at >= cutoff
}

// customerText is the customer id in an orders value "customerId:millis", as
// the scripts' customerOf reads it.
func customerText(value string) string {
	customer, _, _ := strings.Cut(value, ":")
	return customer
}
