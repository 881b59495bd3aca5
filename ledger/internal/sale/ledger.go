// Package sale is the ledger's use cases over the store and the Redis gate:
// reserving, writing what the gate admitted (the group commit's policy),
// confirming, releasing and refunding, settling the uses whose writes failed
// on a fault, the operator's changes to a voucher, and the standard path's
// per-voucher bound. Postgres decides; Redis is told after.
package sale

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Ledger is the ledger's use cases: the Postgres store, and for flash vouchers
// the Redis gate kept in step with it. Postgres decides; Redis is told after.
type Ledger struct {
	store   *store.Store
	writer  *Writer
	gate    *gate.Gate     // nil when no Redis is configured: flash vouchers are then unavailable
	pub     gate.Publisher // names vouchers whose stock came back; nil without Redis
	settler *Settler
	log     *slog.Logger
	limiter *Limiter // bounds the standard path per voucher; nil: unbounded

	admissions AdmissionLog // writes of writePath log vouchers; nil: they answer 503

	warming singleflight.Group
}

// NewLedger returns a Ledger over store, writing admitted reservations with w,
// and g (g may be nil), settling Redis with settler; pub (nil without Redis)
// announces stock coming back on gate.ChangesChannel.
func NewLedger(st *store.Store, w *Writer, g *gate.Gate, pub gate.Publisher, settler *Settler, log *slog.Logger) *Ledger {
	return &Ledger{store: st, writer: w, gate: g, pub: pub, settler: settler, log: log}
}

// LimitStandard bounds the standard path's reserves per voucher with lim
// (before the ledger serves).
func (l *Ledger) LimitStandard(lim *Limiter) { l.limiter = lim }

// ErrNoGate answers flash-voucher operations when the ledger has no Redis.
var ErrNoGate = fmt.Errorf("flash voucher needs Redis: %w", voucher.ErrUnavailable)

// Voucher returns a voucher with its counters.
func (l *Ledger) Voucher(ctx context.Context, code string) (voucher.Voucher, error) {
	return l.store.Voucher(ctx, code)
}

// Reservation returns one reservation.
func (l *Ledger) Reservation(ctx context.Context, code, orderID string) (r voucher.Reservation, err error) {
	err = l.awaitLogged(ctx, code, orderID, func() error {
		r, err = l.store.Reservation(ctx, code, orderID)
		return err
	})
	return r, err
}

// Warmup loads a flash voucher into Redis from a database snapshot: remaining =
// total_limit - used_count, and the orders that hold uses. It never overwrites a
// loaded voucher. Concurrent callers for one voucher share one load.
//
// It runs under the voucher's lock (as a reconcile and an admin change's
// Redis step do), and once it loaded, it catches up with what committed
// between its snapshot and the load: those writes, releases and changes found
// the voucher not loaded, so their own Redis steps changed nothing.
func (l *Ledger) Warmup(ctx context.Context, code string) error {
	if l.gate == nil {
		return ErrNoGate
	}
	if store.HoldsVoucherLock(ctx, code) {
		// A reconcile that found the voucher not loaded: it holds the lock,
		// which a shared load in flight may be waiting for.
		return l.warmLocked(ctx, code)
	}
	_, err, _ := l.warming.Do(code, func() (any, error) {
		return nil, l.store.WithVoucherLock(ctx, code, func(ctx context.Context) error {
			return l.warmLocked(ctx, code)
		})
	})
	return err
}

// warmLocked is Warmup under the voucher's lock.
func (l *Ledger) warmLocked(ctx context.Context, code string) error {
	v, active, finished, err := l.snapshot(ctx, code)
	if err != nil {
		return err
	}
	snap := gate.Snapshot{Voucher: v, Remaining: int64(v.Remaining), Orders: active}
	held := make(map[string]bool, len(active))
	for _, o := range active {
		held[o.OrderID] = true
	}
	for _, o := range finished {
		if !held[o.OrderID] { // confirmed late since the snapshot: it holds a use
			snap.Finished = append(snap.Finished, o)
		}
	}
	loaded, err := l.gate.Load(ctx, code, snap)
	if err != nil {
		return fmt.Errorf("load %s into redis: %w", code, err)
	}
	if !loaded {
		return nil // loaded already: every step since finds it and acts on it
	}
	l.log.Info("voucher loaded into redis", "code", code, "remaining", v.Remaining, "orders", len(active))
	return l.catchUp(ctx, code, v, held)
}

// snapshot reads what Warmup loads: the voucher, the orders holding its uses,
// and those that gave theirs back.
func (l *Ledger) snapshot(ctx context.Context, code string) (voucher.Voucher, []gate.Order, []gate.Order, error) {
	v, orders, err := l.store.Snapshot(ctx, code)
	if err != nil {
		return voucher.Voucher{}, nil, nil, err
	}
	if !v.FlashSale {
		return voucher.Voucher{}, nil, nil, voucher.Errorf(voucher.CodeInvalidRequest, "voucher %s is not a flash-sale voucher", code)
	}
	finished, err := l.store.FinishedOrders(ctx, code)
	if err != nil {
		return voucher.Voucher{}, nil, nil, err
	}
	toGate := func(os []store.ActiveOrder) []gate.Order {
		out := make([]gate.Order, len(os))
		for i, o := range os {
			out[i] = gate.Order{OrderID: o.OrderID, CustomerID: o.CustomerID}
		}
		return out
	}
	return v, toGate(orders), toGate(finished), nil
}

// catchUp brings a voucher just loaded from snapshot (v, held) up to what the
// database holds now: orders that took a use since are held, orders that gave
// theirs back are released, and changed terms are applied. A step racing it
// (a release committed meanwhile, whose own Redis step ran before this one's)
// is settled by reading the orders it touched once more after acting, as
// Settle does: whichever runs last leaves Redis agreeing with the database.
func (l *Ledger) catchUp(ctx context.Context, code string, v voucher.Voucher, held map[string]bool) error {
	now, active, _, err := l.snapshot(ctx, code)
	if err != nil {
		return fmt.Errorf("catch up %s after its load: %w", code, err)
	}
	if store.TermsOf(now) != store.TermsOf(v) {
		if _, err := l.gate.Update(ctx, code, now); err != nil {
			return fmt.Errorf("catch up %s's terms after its load: %w", code, err)
		}
	}
	var touched []string
	for _, o := range active {
		if held[o.OrderID] {
			delete(held, o.OrderID)
			continue
		}
		touched = append(touched, o.OrderID)
	}
	for id := range held { // held at the snapshot, given back since
		touched = append(touched, id)
	}
	if len(touched) == 0 {
		return nil
	}
	l.log.Info("voucher loaded into redis: caught up with what committed during the load", "code", code, "orders", len(touched))
	return l.settler.Agree(ctx, code, touched)
}

// Reserve serves the public reserve route; replayed reports a retry answered
// from the row an earlier request wrote. Retries are decided before
// eligibility on every path. Standard vouchers take the guarded UPDATE; a
// flash voucher passes the Redis gate first, exactly as through the proxy (the
// script decides pause, window and minimum), so that Redis and Postgres never
// diverge.
func (l *Ledger) Reserve(ctx context.Context, code string, cl voucher.Claim) (r voucher.Reservation, replayed bool, err error) {
	v, err := l.store.Terms(ctx, code)
	if err != nil {
		return voucher.Reservation{}, false, err
	}
	if !v.FlashSale {
		err = l.limiter.Do(ctx, code, func() (err error) {
			r, replayed, err = l.writer.Reserve(ctx, code, cl)
			return err
		})
		return r, replayed, err
	}
	if r, found, err := l.store.Existing(ctx, code, cl); found || err != nil {
		if found && r.VoucherCode == code && r.Status.Active() {
			// Redis may have lost the order (a restart from an older
			// snapshot): hold it again, so the proxy's path admits its retry.
			// Only this voucher's row: an orderId of another voucher is a
			// conflict, and holding it here would take one of this
			// voucher's uses for a row that holds another's.
			l.reassert(ctx, code, []gate.Order{{OrderID: r.OrderID, CustomerID: r.CustomerID}})
		}
		return r, found, err
	}
	res, err := l.admit(ctx, code, cl)
	if err != nil {
		return voucher.Reservation{}, false, err
	}
	if err := res.Err(); err != nil {
		return voucher.Reservation{}, false, err
	}
	return l.WriteAdmitted(ctx, code, cl)
}

// admit runs the reserve script for one claim, loading the voucher once if
// Redis does not have it.
func (l *Ledger) admit(ctx context.Context, code string, cl voucher.Claim) (gate.Result, error) {
	if l.gate == nil {
		return 0, ErrNoGate
	}
	item := []gate.Item{{CustomerID: cl.CustomerID, OrderID: cl.OrderID, OrderAmount: cl.OrderAmount}}
	return gate.AdmitWarm(ctx, func(ctx context.Context) (gate.Result, error) {
		res, _, err := l.gate.Reserve(ctx, code, item)
		if err != nil {
			return 0, fmt.Errorf("reserve %s in redis: %w: %w", code, err, voucher.ErrUnavailable)
		}
		return res[0], nil
	}, func(ctx context.Context) error { return l.Warmup(ctx, code) })
}

// WriteAdmitted makes a use that the gate admitted durable: the redemption row,
// the customer's count and used_count, idempotent by orderId (replayed: the
// answer is read from an earlier request's row). If the database rejects or
// fails the write, the use goes back to Redis and the caller gets the mapped
// error (see Drop for the out-of-stock case); Postgres's constraints stay the
// last guard whatever Redis said.
func (l *Ledger) WriteAdmitted(ctx context.Context, code string, cl voucher.Claim) (r voucher.Reservation, replayed bool, err error) {
	out := l.WriteAdmittedMany(ctx, code, []voucher.Claim{cl})
	return out[0].Reservation, out[0].Replayed, out[0].Err
}

// WriteAdmittedMany is WriteAdmitted for claims that arrived together; they
// are written in one transaction when no guard fires.
func (l *Ledger) WriteAdmittedMany(ctx context.Context, code string, claims []voucher.Claim) []store.Written {
	// The terms are cached (store.TermsTTL): a failed read goes on to the
	// group commit, which reads them again and answers the failure.
	if v, err := l.store.Terms(ctx, code); err == nil && v.FlashSale && v.WritePath == voucher.WritePathLog {
		return l.appendAdmitted(ctx, v, claims)
	}
	ids := make([]string, len(claims))
	for i, cl := range claims {
		ids[i] = cl.OrderID
	}
	// WriteMany returns once its batch did (a caller that leaves meanwhile
	// still waits for it), so what is parked below is parked from the
	// batch's side; another lane's write of the same order may still run,
	// and the settler waits for it too.
	writing := l.settler.writing(code, ids)
	out := l.writer.WriteMany(ctx, code, claims)
	writing()
	if l.gate == nil {
		return out
	}
	var givenBack, dropped, unsettled []string
	var holding []gate.Order // committed orders holding a use: Redis must hold them too
	for i := range out {
		if r := out[i].Reservation; r.Status.Active() && r.VoucherCode == code && (out[i].Err == nil || r.CustomerID == claims[i].CustomerID) {
			holding = append(holding, gate.Order{OrderID: r.OrderID, CustomerID: r.CustomerID})
		}
		switch err := out[i].Err; {
		case err == nil:
		case voucher.IsFault(err):
			// A fault (timeout, the caller left, the connection broke, no
			// connection at all): the write may have committed, or the order
			// may have had its row already, so nothing is given back yet. The
			// use stays held until the database can tell (Settler.Resolve).
			unsettled = append(unsettled, claims[i].OrderID)
			out[i].Err = fmt.Errorf("write %s/%s: %w: %w", code, claims[i].OrderID, err, voucher.ErrUnavailable)
		case voucher.ErrorCode(err) == voucher.CodeOutOfStock:
			// The database has no use left: Redis counted one too many. Forget
			// the order without restocking, so Redis converges on the database
			// instead of admitting the next request into the same refusal.
			dropped = append(dropped, claims[i].OrderID)
		case out[i].Replayed && out[i].Reservation.VoucherCode == code && out[i].Reservation.Status.Active() &&
			out[i].Reservation.CustomerID == claims[i].CustomerID:
			// Answered from this order's own row, which holds the use Redis
			// holds for it (a retry with another amount, say): nothing to give
			// back, and giving it back would leave the order unheld in Redis.
		default:
			// Refused: no row holds this admission's use (a row that exists
			// and holds one is held again by Settle below).
			givenBack = append(givenBack, claims[i].OrderID)
		}
	}
	l.settler.Park(code, unsettled)
	l.reassert(ctx, code, holding)
	bg := context.WithoutCancel(ctx)
	for _, give := range []struct {
		back   func(context.Context, string, ...string) (int, error)
		orders []string
	}{{l.gate.GiveBack, givenBack}, {l.gate.Drop, dropped}} {
		if len(give.orders) == 0 {
			continue
		}
		if _, err := give.back(bg, code, give.orders...); err != nil {
			l.log.Error("give back after failed write", "code", code, "orders", len(give.orders), "err", err)
		}
		l.settler.Settle(bg, code, give.orders...)
	}
	return out
}

// Unsettled parks orders of code whose admission's fate a proxy could not
// learn: the settler resolves them once wait (HANGING_GRACE) has passed, when
// no write of them can still commit: a row that holds one keeps it held in
// Redis, the others get their uses back.
func (l *Ledger) Unsettled(code string, orderIDs []string, wait time.Duration) {
	l.settler.ParkFor(code, orderIDs, wait)
}

// Confirm confirms a reservation (idempotent). A late payment (the hold ran
// out) takes a use again when one is left; for a flash voucher that use is
// taken in Redis first when the gate can take it, and given back there if the
// database then refuses. A refunded or cancelled reservation is refused.
func (l *Ledger) Confirm(ctx context.Context, code, orderID string) (voucher.Reservation, error) {
	var r voucher.Reservation
	var late bool
	err := l.awaitLogged(ctx, code, orderID, func() (err error) {
		r, late, err = l.store.Confirm(ctx, code, orderID)
		return err
	})
	if err != nil || !late {
		return r, err
	}
	// A late confirmation takes a use in Redis and then in the database:
	// once begun it goes on when its caller leaves (each statement and
	// script call keeps its own deadline), as an admitted write does, so that
	// a payment callback's short deadline never leaves the two halves apart
	// (found by the VOPR: a confirmation cancelled while its transaction
	// committed left the order CONFIRMED in the database and not held in
	// Redis, and its retry was answered from the row).
	ctx = context.WithoutCancel(ctx)
	v, err := l.store.Terms(ctx, code)
	if err != nil {
		return voucher.Reservation{}, err
	}
	mayTake := !v.FlashSale
	heldByUs := false // a Redis use this call took and must give back if the database refuses
	for {
		r, did, err := l.store.LateConfirm(ctx, code, orderID, mayTake)
		switch {
		case v.FlashSale && mayTake && voucher.IsFault(err):
			// A fault: the transaction may have committed and taken a use
			// in the database, whether or not this call took one in Redis
			// (a use found held or finished there was not taken here). The
			// database decides once it answers (Resolve).
			l.settler.Park(code, []string{orderID})
		case heldByUs && err != nil:
			if _, rerr := l.gate.Release(ctx, code, orderID); rerr != nil {
				l.log.Error("release after late confirm", "code", code, "order", orderID, "err", rerr)
			}
		}
		if v.FlashSale && (did == store.LateTookUse || heldByUs) {
			// The Redis entry this confirmation relied on may have been given
			// back meanwhile by a release, a sweep or a refused retry of the
			// same order: make sure Redis holds the use the database holds.
			l.settler.Settle(ctx, code, orderID)
		}
		if err != nil || did != store.LateNeedsUse {
			return r, err
		}
		res, err := l.admit(ctx, code, voucher.Claim{CustomerID: r.CustomerID, OrderID: orderID, OrderAmount: amountOf(r)})
		if err != nil {
			return voucher.Reservation{}, err
		}
		switch err := res.Err(); {
		case res == gate.OutOfStock:
			return voucher.Reservation{}, store.ErrLateNoUseLeft
		case res == gate.AlreadyUsed:
			return voucher.Reservation{}, store.ErrLateOverLimit
		case voucher.IsFault(err):
			return voucher.Reservation{}, err // not loaded after a warmup, or unknown
		}
		if res != gate.Reserved && res != gate.Duplicate && v.WritePath == voucher.WritePathLog {
			if res, err = l.takeLate(ctx, code, orderID, r.CustomerID); err != nil {
				return voucher.Reservation{}, err
			}
		}
		// Reserved: the gate took the use. Anything else (the order is held or
		// recorded finished, or a refusal by pause, window or minimum, which a
		// payment for an order placed earlier is not subject to): the
		// database's guards decide alone, and Settle holds the use in Redis.
		mayTake, heldByUs = true, res == gate.Reserved
	}
}

// takeLate takes in Redis the use of a late confirmation of a writePath log
// voucher whose order the gate did not admit as a new one: recorded finished,
// or refused by pause, window or minimum (a payment for an order placed
// earlier is not subject to them). The use is taken in Redis all the same,
// where the uses promised by records still in the admissions log are counted;
// the database does not count them, and deciding alone it handed out a use
// already promised, whose record the consumer then dead-lettered after its
// 201 (the log VOPR). No use left, or the customer at its limit: refused.
func (l *Ledger) takeLate(ctx context.Context, code, orderID string, customerID int64) (gate.Result, error) {
	res, err := l.gate.Take(ctx, code, orderID, customerID)
	if err == nil && res == gate.NotLoaded {
		err = fmt.Errorf("voucher not loaded")
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("take a use for the late confirmation of %s/%s in redis: %w: %w",
			code, orderID, err, voucher.ErrUnavailable)
	case res == gate.OutOfStock:
		return 0, store.ErrLateNoUseLeft
	case res == gate.AlreadyUsed:
		return 0, store.ErrLateOverLimit
	}
	return res, nil
}

// amountOf is the order amount a reservation was made with; 0 for a row
// written before amounts were kept.
func amountOf(r voucher.Reservation) int64 {
	if r.OrderAmount == nil {
		return 0
	}
	return *r.OrderAmount
}

// Release cancels a reservation (final) and gives its use back, in Postgres
// and then in Redis. Releasing twice, or releasing a refunded one, is fine; a
// confirmed reservation cannot be released.
func (l *Ledger) Release(ctx context.Context, code, orderID string) error {
	ctx = context.WithoutCancel(ctx) // see endHold
	var r voucher.Reservation
	var released bool
	err := l.endHold(ctx, code, orderID, func() (err error) {
		r, released, err = l.store.Release(ctx, code, orderID)
		return err
	})
	if err != nil || !released {
		return err
	}
	return l.Restocked(ctx, code, r.OrderID)
}

// Refund pays a confirmed reservation back and gives its use back to the
// voucher and the customer, in Postgres and then in Redis. A refunded one is
// answered as it is (idempotent); anything else not confirmed is NOT_CONFIRMED.
func (l *Ledger) Refund(ctx context.Context, code, orderID string) (voucher.Reservation, error) {
	ctx = context.WithoutCancel(ctx) // see endHold
	var r voucher.Reservation
	var refunded bool
	err := l.endHold(ctx, code, orderID, func() (err error) {
		r, refunded, err = l.store.Refund(ctx, code, orderID)
		return err
	})
	if err != nil || !refunded {
		return r, err
	}
	return r, l.Restocked(ctx, code, r.OrderID)
}

// endHold runs a release's or a refund's transaction (op), which gives a use
// back in the database before Restocked gives it back in Redis. Its callers
// run it, and what follows, without their caller's cancellation (each
// statement and script call keeps its own deadline), as a late confirmation
// does: a release whose client left while its transaction committed saw
// "context canceled", skipped Redis's give-back, and left the order RELEASED
// in the database and held in Redis, its retries answered from the row (found
// by the VOPR beside a CPU hog). A fault may still leave the commit unknown
// (DB_TIMEOUT during COMMIT): the order is parked, and the settler makes
// Redis agree with whatever the database holds once it answers.
func (l *Ledger) endHold(ctx context.Context, code, orderID string, op func() error) error {
	err := l.awaitLogged(ctx, code, orderID, op)
	if voucher.IsFault(err) && l.gate != nil {
		l.settler.Park(code, []string{orderID})
	}
	return err
}

// Restocked tells Redis (for a flash voucher) and every subscriber that the
// database gave orderID's use back. The database has committed: a failure here
// only leaves Redis holding a use (undersell) until the reconciler notices, or
// a proxy's sold-out flag standing until its TTL.
func (l *Ledger) Restocked(ctx context.Context, code, orderID string) error {
	// The release has committed: what follows runs even when the caller has
	// left (a client's deadline), or Redis would keep the use it gave back.
	bg := context.WithoutCancel(ctx)
	if l.gate == nil {
		return nil
	}
	v, err := l.store.Terms(bg, code)
	if err != nil {
		l.settler.Park(code, []string{orderID}) // Resolve gives its use back once the database answers
		return err
	}
	if v.FlashSale {
		if _, err := l.gate.Release(bg, code, orderID); err != nil {
			l.log.Error("release in redis", "code", code, "order", orderID, "err", err)
		}
		// A late confirmation may have taken the use again meanwhile.
		l.settler.Settle(bg, code, orderID)
	}
	PublishChange(bg, l.pub, code, l.log)
	return nil
}

// reassert makes Redis hold orders that hold a use in the database (see
// Settler.Reassert) and, when Redis had lost some, names the voucher on the
// change channel: a proxy's sold-out flag set meanwhile would refuse their
// retries.
func (l *Ledger) reassert(ctx context.Context, code string, orders []gate.Order) {
	bg := context.WithoutCancel(ctx)
	if l.settler.reassert(bg, code, orders) > 0 {
		PublishChange(bg, l.pub, code, l.log)
	}
}

// PublishChange names code on the change channel, so that proxies drop their
// sold-out flag and cached terms at once; a failure is logged (they fall back
// to their TTLs). A nil p publishes nothing.
func PublishChange(ctx context.Context, p gate.Publisher, code string, log *slog.Logger) {
	if p == nil {
		return
	}
	if err := gate.PublishChange(ctx, p, code); err != nil {
		log.Error("publish voucher change", "code", code, "err", fmt.Errorf("proxies fall back to their TTLs: %w", err))
	}
}
