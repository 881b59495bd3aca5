// Package codes is what the proxy knows of which vouchers exist: the set of
// every voucher's code (Set), so that a made-up code is answered 404 at the
// edge, and the budget of lookups at the ledger (LookupBudget) that reads it
// and a voucher's terms.
package codes

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Set is the set of every voucher code the ledger has, so that a
// reserve for any other code is answered 404 VOUCHER_NOT_FOUND at the edge,
// without Redis, the ledger or Postgres: a flood of made-up codes costs the
// sale nothing. It is loaded whole at start (GET /internal/voucher-codes), a
// code published on the change channel is added at once (the ledger publishes
// every creation), and a code the set does not hold re-reads the whole set at
// most once per every (LIVE_CODES_REFRESH), which covers a lost publish.
//
// Readers take no lock: the set is an immutable map behind an atomic pointer,
// replaced whole by a load or by an add (rare: a voucher's creation).
type Set struct {
	set   atomic.Pointer[map[string]struct{}] // nil until the first load succeeds: every code is asked
	load  func(ctx context.Context) ([]string, error)
	every time.Duration // 0: a miss always re-reads (concurrent misses share one read)
	now   func() time.Time
	log   *slog.Logger

	// sync, when set, waits until the changes published before it was
	// called reached Add (gate.Watcher.Sync), for at most syncWait: a miss
	// between two re-reads still finds a code created a moment ago.
	sync     atomic.Pointer[func(ctx context.Context) error]
	syncWait time.Duration
	// bound is the deadline the misses of one moment share for their sync
	// (syncBound): a deadline of its own per miss was a timer and a context
	// per made-up code, a third of what a flood of them cost beyond its
	// wait.
	bound atomic.Pointer[syncBound]

	next   atomic.Int64 // unix nanos before which a miss does not re-read
	flight singleflight.Group

	mu      sync.Mutex // orders adds against the swap of a load's result
	loading bool
	added   []string // codes added while a load ran: its result may predate them

	unknown, loads, loadErrors atomic.Int64 // for the metrics
}

// New returns a set read by load, re-read by a miss at most once per every
// (LIVE_CODES_REFRESH); a miss between two re-reads waits up to syncWait for
// the change channel (SyncWith). now is the set's clock; nil: time.Now.
func New(load func(ctx context.Context) ([]string, error), every, syncWait time.Duration, now func() time.Time, log *slog.Logger) *Set {
	if now == nil {
		now = time.Now
	}
	return &Set{load: load, every: every, syncWait: syncWait, now: now, log: log}
}

// SyncWith makes a miss between two re-reads wait for sync first (see the
// field).
func (s *Set) SyncWith(sync func(ctx context.Context) error) { s.sync.Store(&sync) }

// Has reports whether code may be a voucher: it is in the set, or the set is
// not loaded (then the caller asks as before). A code outside the set re-reads
// it when a re-read is due, waiting for that read; other misses wait for the
// change channel to deliver what was published before them (one Redis ping on
// the subscription, shared by the misses of that moment), so a voucher whose
// creation was answered before this request was sent is found. Has counts the
// codes it refuses.
func (s *Set) Has(ctx context.Context, code string) bool {
	set := s.set.Load()
	if set != nil {
		if _, ok := (*set)[code]; ok {
			return true
		}
	}
	if s.due() {
		_ = s.Load(ctx)
		set = s.set.Load()
	} else if sync := s.sync.Load(); sync != nil && set != nil {
		if err := (*sync)(s.syncBound(ctx)); err == nil {
			set = s.set.Load()
		}
	}
	if set == nil {
		return true
	}
	if _, ok := (*set)[code]; ok {
		return true
	}
	s.unknown.Add(1)
	return false
}

// syncBound is a deadline shared by the misses of one moment.
type syncBound struct {
	ctx    context.Context
	cancel context.CancelFunc // the timer's: it ends ctx at the deadline by itself
}

// boundReuse is the share of syncWait a shared bound may have used up and
// still be handed to a new miss: each miss waits for its sync between 7/8
// of syncWait and syncWait, and the misses of one such stretch (about 31 ms
// at the default REDIS_TIMEOUT) share one timer.
const boundReuse = 8

// syncBound returns the context a miss syncs under: it ends within syncWait,
// and at least 7/8 of syncWait from now. It does not end with the request
// that made it, nor with any other: a client gone costs its miss no more than
// that bound, and the pong usually ends the wait in a millisecond or two.
func (s *Set) syncBound(ctx context.Context) context.Context {
	b := s.bound.Load()
	if b != nil {
		if dl, _ := b.ctx.Deadline(); time.Until(dl) >= s.syncWait-s.syncWait/boundReuse {
			return b.ctx
		}
	}
	// Only its deadline is read: Sync waits on Done, nothing reads a value.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.syncWait)
	// A miss of the same moment may have made one too: each keeps its own.
	s.bound.CompareAndSwap(b, &syncBound{ctx: bctx, cancel: cancel})
	return bctx
}

// due reports whether this miss re-reads the set, and if so moves the next
// re-read one interval on: of the misses of one interval, one re-reads.
func (s *Set) due() bool {
	now := s.now().UnixNano()
	next := s.next.Load()
	return now >= next && s.next.CompareAndSwap(next, now+int64(s.every))
}

// Load reads the whole set from the ledger and puts it in place, with the
// codes added meanwhile; concurrent calls share one read. A failure leaves the
// set as it was (logged; the next due miss tries again). The read outlives
// the request that started it (LEDGER_TIMEOUT bounds each page).
func (s *Set) Load(ctx context.Context) error {
	_, err, _ := s.flight.Do("", func() (any, error) {
		s.mu.Lock()
		s.loading, s.added = true, nil
		s.mu.Unlock()
		codes, err := s.load(context.WithoutCancel(ctx))
		s.mu.Lock()
		defer s.mu.Unlock()
		s.loading = false
		s.loads.Add(1)
		s.next.Store(s.now().UnixNano() + int64(s.every)) // a read was just made, whatever started it
		if err != nil {
			s.loadErrors.Add(1)
			s.log.Warn("read the voucher codes", "err", err)
			return nil, err
		}
		set := make(map[string]struct{}, len(codes)+len(s.added))
		for _, c := range codes {
			set[c] = struct{}{}
		}
		for _, c := range s.added {
			set[c] = struct{}{}
		}
		s.added = nil
		s.set.Store(&set)
		return nil, nil
	})
	if err != nil {
		return fmt.Errorf("voucher codes: %w", err)
	}
	return nil
}

// Add puts code in the set: the ledger published a change of it, so it
// exists (vouchers are never deleted). Known codes cost a map read; a new one
// copies the set, as a creation is rare.
func (s *Set) Add(code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loading {
		s.added = append(s.added, code)
	}
	set := s.set.Load()
	if set == nil {
		return
	}
	if _, ok := (*set)[code]; ok {
		return
	}
	next := make(map[string]struct{}, len(*set)+1)
	for c := range *set {
		next[c] = struct{}{}
	}
	next[code] = struct{}{}
	s.set.Store(&next)
}

// Size is how many codes the set holds; 0 before the first load.
func (s *Set) Size() int {
	if set := s.set.Load(); set != nil {
		return len(*set)
	}
	return 0
}

// Unknown is how many codes Has refused.
func (s *Set) Unknown() int64 { return s.unknown.Load() }

// Loads is how many reads of the whole set were made, failed ones included.
func (s *Set) Loads() int64 { return s.loads.Load() }

// LoadErrors is how many reads of the whole set failed.
func (s *Set) LoadErrors() int64 { return s.loadErrors.Load() }
