package sale

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Settler makes Redis agree with the database about single orders of flash
// vouchers, for both the requests and the background jobs: at once after a
// step that may have raced another (Settle), or, for orders whose write failed
// on a fault, once the database answers again (Park, then Resolve). Postgres
// decides; Redis is told after.
type Settler struct {
	store *store.Store
	gate  *gate.Gate // nil when no Redis is configured: there is nothing to settle
	now   func() time.Time
	log   *slog.Logger

	// fence is how long after a failed write returned a statement of it may
	// still commit in Postgres: see WaitAfterFault.
	fence time.Duration

	// logLag is the admissions consumer's measured lag (UseLogLag); nil:
	// no consumer here.
	logLag func() (time.Duration, bool)

	// unsettled holds orders whose write failed on a fault: whether it
	// committed (or whether the order had a row already) can only be learned
	// from the database once it answers again and the write can no longer
	// commit. Their Redis uses stay held until Resolve finds out. writing
	// counts the writes of each order in flight: none is resolved while one
	// is (another lane's batch may still commit it).
	mu        sync.Mutex
	Unsettled map[string]map[string]parked // code -> orderID -> parked
	Writes    map[string]map[string]int    // code -> orderID -> writes in flight

	// afterRead runs, when set (tests only), between Settle's read of the
	// database and its step in Redis: where a release may commit.
	afterRead func()
}

// parked is an order whose write failed on a fault, or whose admission's fate
// a proxy could not learn.
type parked struct {
	since     time.Time // parked first (unsettledGiveUp counts from it)
	notBefore time.Time // the last failed write's return plus the fence, or a hand-over plus HANGING_GRACE
}

// NewSettler returns a Settler over store and g (g may be nil); now is the
// clock that ages parked orders.
func NewSettler(st *store.Store, g *gate.Gate, now func() time.Time, log *slog.Logger) *Settler {
	return &Settler{store: st, gate: g, now: now, log: log,
		Unsettled: map[string]map[string]parked{}, Writes: map[string]map[string]int{}}
}

// UseLogLag gives the settler the admissions consumer group's lag (before
// the ledger serves; admissions.GroupLag): a parked order of a writePath log
// voucher with no row may have its record still in the log, so it is
// settled only once the group has consumed every record acknowledged before
// the order could last be written (the lag is shorter than the time since),
// and never without a known lag.
func (s *Settler) UseLogLag(f func() (time.Duration, bool)) { s.logLag = f }

// logDue keeps those of code's parked orders ids whose records, if any, the
// admissions group has consumed: all of them unless code is a log voucher.
func (s *Settler) logDue(ctx context.Context, code string, ids []string) []string {
	v, err := s.store.Terms(ctx, code)
	if err != nil || v.WritePath != voucher.WritePathLog {
		return ids
	}
	if s.logLag == nil {
		return nil
	}
	lag, known := s.logLag()
	if !known {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var due []string
	for _, id := range ids {
		// The later of the two: Drain clears notBefore.
		if p, ok := s.Unsettled[code][id]; ok && now.Sub(maxTime(p.since, p.notBefore)) > lag {
			due = append(due, id)
		}
	}
	return due
}

// WaitAfterFault sets the fence (none until it is set): how long after a
// failed write returned its orders are left parked before Resolve asks the
// database, because a statement of that write may still be running there and
// commit. The
// ledger's sessions run with statement_timeout at DB_TIMEOUT, so the server
// cancels such a statement within DB_TIMEOUT of its start; main sets twice
// that (see openPool).
func (s *Settler) WaitAfterFault(d time.Duration) { s.fence = d }

// writing records that a write of orderIDs of code is starting; the returned
// func records its end. Parked orders are resolved only once no write of
// them is in flight: the answer a write's caller gave up on may still be on
// its way, and the give-back would race its commit.
func (s *Settler) writing(code string, orderIDs []string) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.Writes[code]
	if m == nil {
		m = map[string]int{}
		s.Writes[code] = m
	}
	for _, id := range orderIDs {
		m[id]++
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		m := s.Writes[code]
		for _, id := range orderIDs {
			if m[id]--; m[id] <= 0 {
				delete(m, id)
			}
		}
		if len(m) == 0 {
			delete(s.Writes, code)
		}
	}
}

// Settle makes Redis agree with the database about orders after a step that
// gave uses back in Redis and may have raced one that took them again in the
// database (a late confirmation): every one of them that holds a use in the
// database is held in Redis too. Both sides re-check after acting, so whichever
// runs last leaves them in agreement.
func (s *Settler) Settle(ctx context.Context, code string, orderIDs ...string) {
	if s.gate == nil || len(orderIDs) == 0 {
		return
	}
	active, err := s.store.ActiveOf(ctx, code, orderIDs)
	if err != nil {
		s.log.Warn("settle: read orders", "code", code, "err", fmt.Errorf("parked until the database answers: %w", err))
		s.Park(code, orderIDs)
		return
	}
	if s.afterRead != nil {
		s.afterRead()
	}
	var held []string
	for _, o := range active {
		if _, err := s.gate.Hold(ctx, code, o.OrderID, o.CustomerID); err != nil {
			s.log.Warn("settle: hold in redis", "code", code, "order", o.OrderID,
				"err", fmt.Errorf("parked until redis answers: %w", err))
			s.Park(code, []string{o.OrderID})
			continue
		}
		held = append(held, o.OrderID)
	}
	if err := s.recheckHeld(ctx, code, held); err != nil {
		s.log.Warn("settle: read again the orders held", "code", code, "orders", len(held),
			"err", fmt.Errorf("parked until both answer: %w", err))
		s.Park(code, held)
	}
}

// recheckHeld reads again orders just held in Redis because the database
// held them: one that finished meanwhile (a release, an expiry or a refund
// that committed and did its own Redis step between the read and the hold)
// would stay held in Redis with no row holding it, until the reconciler freed
// it (a repair: the log VOPR found one). Agree releases it.
func (s *Settler) recheckHeld(ctx context.Context, code string, held []string) error {
	if len(held) == 0 {
		return nil
	}
	return s.Agree(ctx, code, held)
}

// Agree makes Redis hold exactly those of orderIDs that hold a use in the
// database, after steps that may have found the voucher not loaded (see
// Ledger.catchUp): the active ones are held, the others released. It reads the
// database again after acting, and acts again while what it read moved (a
// step committing meanwhile whose own Redis step ran before this one's), so
// that whichever side acts last leaves them in agreement.
func (s *Settler) Agree(ctx context.Context, code string, orderIDs []string) error {
	if s.gate == nil || len(orderIDs) == 0 {
		return nil
	}
	var last map[string]bool
	for range 3 {
		active, err := s.store.ActiveOf(ctx, code, orderIDs)
		if err != nil {
			return err
		}
		now := make(map[string]bool, len(active))
		for _, o := range active {
			now[o.OrderID] = true
		}
		if last != nil && maps.Equal(last, now) {
			return nil
		}
		last = now
		for _, o := range active {
			if _, err := s.gate.Hold(ctx, code, o.OrderID, o.CustomerID); err != nil {
				return fmt.Errorf("hold %s/%s in redis: %w", code, o.OrderID, err)
			}
		}
		var gone []string
		for _, id := range orderIDs {
			if !now[id] {
				gone = append(gone, id)
			}
		}
		if len(gone) > 0 {
			if _, err := s.gate.Release(ctx, code, gone...); err != nil {
				return fmt.Errorf("release %d orders of %s in redis: %w", len(gone), code, err)
			}
		}
	}
	return nil
}

// reassertTimeout bounds Reassert, which runs after a commit before the answer:
// a slow Redis costs each write at most this. An order it could not put back
// is found by the reconciler (after a Redis restart, at once: the jobs
// reconcile what the restarted Redis inherited every second).
const reassertTimeout = 250 * time.Millisecond

// reassert makes Redis hold orders the database holds a use for, just
// committed or found by a retry: Redis may have lost them while their write
// was in flight (a reload from the database before the commit, a restart from
// an older snapshot), and would refuse their retries OUT_OF_STOCK until the
// next reconcile. It returns how many Redis had lost; a failure is logged and
// left for the reconciler.
func (s *Settler) reassert(ctx context.Context, code string, orders []gate.Order) int {
	if s.gate == nil || len(orders) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, reassertTimeout)
	defer cancel()
	n, err := s.gate.Reassert(ctx, code, orders)
	if err != nil {
		// Resolve holds them once Redis answers (they hold uses in the
		// database), as Reassert would have.
		ids := make([]string, len(orders))
		for i, o := range orders {
			ids[i] = o.OrderID
		}
		s.log.Warn("reassert committed orders in redis", "code", code, "orders", len(orders),
			"err", fmt.Errorf("parked until redis answers: %w", err))
		s.Park(code, ids)
		return 0
	}
	if n > 0 {
		s.log.Warn("redis had lost committed orders: held again", "code", code, "orders", n)
	}
	return n
}

// Park records orders whose fate the database must settle later (Resolve),
// once their failed write has returned: it is called from the write's side,
// after the write's last statement ended, never from a caller that gave up
// while the write ran on. Resolve leaves them until the fence has passed.
func (s *Settler) Park(code string, orderIDs []string) {
	if len(orderIDs) == 0 {
		return
	}
	s.ParkFor(code, orderIDs, s.fence)
}

// ParkFor records orders whose admission's fate nobody could learn (a proxy
// lost the reserve script's reply, or its admitted write's answer): their
// Redis use may be held with no write under way, or a write of them may still
// reach a ledger. Resolve settles them once wait (HANGING_GRACE: the longest
// an admission's write can still commit) has passed.
func (s *Settler) ParkFor(code string, orderIDs []string, wait time.Duration) {
	if len(orderIDs) == 0 {
		return
	}
	s.mu.Lock()
	m := s.Unsettled[code]
	if m == nil {
		m = map[string]parked{}
		s.Unsettled[code] = m
	}
	now := s.now()
	for _, id := range orderIDs {
		p, ok := m[id]
		if !ok {
			p.since = now
		}
		p.notBefore = maxTime(p.notBefore, now.Add(wait))
		m[id] = p
	}
	s.mu.Unlock()
	s.mark(code, orderIDs, now.Add(wait))
}

// markTimeout bounds the Redis step of a park: it runs on a write's failure
// path, often because Redis is slow.
const markTimeout = 250 * time.Millisecond

// mark records the parked orders in Redis (gate.Park), so that no ledger's
// reconciler frees them before a settler settles them, and any ledger's
// settler can adopt them (Adopt) if this one dies. A failure is logged: the
// orders stay parked here; a reconcile may then settle them first.
func (s *Settler) mark(code string, orderIDs []string, notBefore time.Time) {
	if s.gate == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
	defer cancel()
	if err := s.gate.Park(ctx, code, orderIDs, notBefore); err != nil {
		s.log.Warn("parked orders not recorded in redis", "code", code, "orders", len(orderIDs), "err", err)
	}
}

// Adopt takes over the orders of code that a settler or a proxy recorded in
// Redis as parked and this one does not track (their ledger stopped or died
// before settling them, or a proxy's hand-over never reached one): they are
// settled here as if parked here, from their notBefore on and at least wait
// (HANGING_GRACE: the longest an admission's write can still commit) after
// their adoption, since a proxy records them with its own, shorter, wait.
// Orders parked longer than gate.ParkedGiveUp ago are left to the reconciler.
// It returns how many it adopted.
func (s *Settler) Adopt(ctx context.Context, code string, wait time.Duration) (int, error) {
	if s.gate == nil {
		return 0, nil
	}
	all, err := s.gate.Parked(ctx, code)
	if err != nil || len(all) == 0 {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	m := s.Unsettled[code]
	n := 0
	for id, notBefore := range all {
		if _, known := m[id]; known || now.Sub(notBefore) > gate.ParkedGiveUp {
			continue
		}
		if m == nil {
			m = map[string]parked{}
			s.Unsettled[code] = m
		}
		m[id] = parked{since: now, notBefore: maxTime(notBefore, now.Add(wait))}
		n++
	}
	return n, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// unsettledGiveUp bounds how long an unsettled order is tracked; past it the
// reconciler (hanging admissions, missing orders) settles it.
const unsettledGiveUp = 10 * time.Minute

// Resolve asks the database about the parked orders: an order that holds a use
// there is held in Redis, one that does not gets its Redis use back. Orders
// stay parked while the database does not answer. It returns how many were
// settled.
func (s *Settler) Resolve(ctx context.Context) int {
	settled := 0
	for code, ids := range s.due() {
		if ids = s.logDue(ctx, code, ids); len(ids) == 0 {
			continue // a record may still be in the log: asked again next round, until unsettledGiveUp leaves it to the reconciler
		}
		held, ok := s.resolve(ctx, code, ids)
		if !ok {
			continue // the database or Redis still does not answer: try again later
		}
		s.mu.Lock()
		var done []string
		for _, id := range ids {
			if ok, tracked := held[id]; tracked && !ok {
				continue // the hold failed: try again next round
			}
			delete(s.Unsettled[code], id)
			done = append(done, id)
			settled++
		}
		s.mu.Unlock()
		if s.gate == nil {
			continue
		}
		if err := s.gate.Unpark(ctx, code, done...); err != nil {
			s.log.Warn("settled orders still recorded as parked in redis", "code", code, "orders", len(done), "err", err)
		}
	}
	return settled
}

// Drain settles every parked order at once, once the fence has passed since
// the last write could have failed: for a ledger that stopped serving (its
// requests drained, none in flight), so that what they parked is not lost with
// the process. The orders handed over with a longer wait (ParkFor) are
// settled too: a write of them at another ledger that commits later holds
// them again after its commit (Reassert). It returns how many it settled.
func (s *Settler) Drain(ctx context.Context) int {
	// Nothing parked: nothing can be any more (no request is in flight), so
	// the stop does not wait out the fence.
	s.mu.Lock()
	parked := 0
	for _, m := range s.Unsettled {
		parked += len(m)
	}
	s.mu.Unlock()
	if parked == 0 {
		return 0
	}
	select {
	case <-ctx.Done():
		return 0
	case <-time.After(s.fence):
	}
	s.mu.Lock()
	for _, m := range s.Unsettled {
		for id, p := range m {
			p.notBefore = time.Time{}
			m[id] = p
		}
	}
	s.mu.Unlock()
	return s.Resolve(ctx)
}

// due returns the parked orders by voucher whose fence has passed and that
// no write has in flight, forgetting those parked longer than
// unsettledGiveUp.
func (s *Settler) due() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	todo := map[string][]string{}
	now := s.now()
	for code, m := range s.Unsettled {
		for id, p := range m {
			if now.Sub(p.since) > unsettledGiveUp {
				delete(m, id)
				continue
			}
			if now.Before(p.notBefore) || s.Writes[code][id] > 0 {
				continue
			}
			todo[code] = append(todo[code], id)
		}
		if len(m) == 0 {
			delete(s.Unsettled, code)
		}
	}
	return todo
}

// resolve holds in Redis the orders of ids that hold a use in the database and
// releases the others. held maps each order found active to whether Redis
// holds it now; ok is false when the database or the release failed.
func (s *Settler) resolve(ctx context.Context, code string, ids []string) (held map[string]bool, ok bool) {
	active, err := s.store.ActiveOf(ctx, code, ids)
	if err != nil {
		return nil, false
	}
	held = map[string]bool{}
	var holding []string
	for _, o := range active {
		_, err := s.gate.Hold(ctx, code, o.OrderID, o.CustomerID)
		held[o.OrderID] = err == nil
		if err == nil {
			holding = append(holding, o.OrderID)
		}
	}
	if err := s.recheckHeld(ctx, code, holding); err != nil {
		for _, id := range holding {
			held[id] = false // parked still: asked again next round
		}
	}
	var free []string
	for _, id := range ids {
		if _, ok := held[id]; !ok {
			free = append(free, id)
		}
	}
	if len(free) > 0 {
		if _, err := s.gate.GiveBack(ctx, code, free...); err != nil {
			return nil, false
		}
		// A retry of one of them may have been written meanwhile (admitted
		// as the order Redis held, committed and re-asserted before the
		// give-back): read them again after acting, as Settle does, so that
		// whichever side acts last leaves them in agreement.
		s.Settle(ctx, code, free...)
	}
	return held, true
}
