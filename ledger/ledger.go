package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sync/singleflight"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Ledger is the ledger's use cases: the Postgres store, and for flash vouchers
// the Redis gate kept in step with it. Postgres decides; Redis is told after.
type Ledger struct {
	store   *Store
	writer  *Writer
	gate    *gate.Gate // nil when no Redis is configured: flash vouchers are then unavailable
	settler *Settler
	log     *slog.Logger

	warming singleflight.Group
}

// NewLedger returns a Ledger over store, writing admitted reservations with w,
// and g (g may be nil), settling Redis with settler.
func NewLedger(store *Store, w *Writer, g *gate.Gate, settler *Settler, log *slog.Logger) *Ledger {
	return &Ledger{store: store, writer: w, gate: g, settler: settler, log: log}
}

// errNoGate answers flash-voucher operations when the ledger has no Redis.
var errNoGate = fmt.Errorf("flash voucher needs Redis: %w", voucher.ErrUnavailable)

// CreateVoucher creates a voucher; a flash voucher is loaded into Redis at once.
// A failed load is only logged: the voucher exists, and the first reserve (or
// POST .../warmup) loads it.
func (l *Ledger) CreateVoucher(ctx context.Context, v voucher.Voucher) (voucher.Voucher, error) {
	v, err := l.store.CreateVoucher(ctx, v)
	if err != nil || !v.FlashSale {
		return v, err
	}
	if err := l.Warmup(ctx, v.Code); err != nil {
		l.log.Warn("flash voucher created but not loaded into Redis", "code", v.Code, "err", err)
	}
	return v, nil
}

// Voucher returns a voucher with its counters.
func (l *Ledger) Voucher(ctx context.Context, code string) (voucher.Voucher, error) {
	return l.store.Voucher(ctx, code)
}

// Reservation returns one reservation.
func (l *Ledger) Reservation(ctx context.Context, code, orderID string) (voucher.Reservation, error) {
	return l.store.Reservation(ctx, code, orderID)
}

// Warmup loads a flash voucher into Redis from a database snapshot: remaining =
// total_limit - used_count, and the orders that hold uses. It never overwrites a
// loaded voucher. Concurrent callers for one voucher share one load.
func (l *Ledger) Warmup(ctx context.Context, code string) error {
	if l.gate == nil {
		return errNoGate
	}
	_, err, _ := l.warming.Do(code, func() (any, error) {
		v, orders, err := l.store.Snapshot(ctx, code)
		if err != nil {
			return nil, err
		}
		if !v.FlashSale {
			return nil, voucher.Errorf(voucher.CodeInvalidRequest, "voucher %s is not a flash-sale voucher", code)
		}
		snap := gate.Snapshot{Voucher: v, Remaining: int64(v.Remaining)}
		for _, o := range orders {
			snap.Orders = append(snap.Orders, gate.Order{OrderID: o.OrderID, CustomerID: o.CustomerID})
		}
		loaded, err := l.gate.Load(ctx, code, snap)
		if err != nil {
			return nil, fmt.Errorf("load %s into redis: %w", code, err)
		}
		if loaded {
			l.log.Info("voucher loaded into redis", "code", code, "remaining", v.Remaining, "orders", len(orders))
		}
		return nil, nil
	})
	return err
}

// Reserve serves the public reserve route. Standard vouchers take the guarded
// UPDATE; a flash voucher passes the Redis gate first, exactly as through the
// proxy, so that Redis and Postgres never diverge.
func (l *Ledger) Reserve(ctx context.Context, code string, cl voucher.Claim) (voucher.Reservation, error) {
	v, err := l.store.Terms(ctx, code)
	if err != nil {
		return voucher.Reservation{}, err
	}
	if !v.FlashSale {
		return l.store.Reserve(ctx, code, cl)
	}
	if r, found, err := l.store.Existing(ctx, code, cl); found || err != nil {
		return r, err
	}
	now, err := l.store.Now(ctx)
	if err != nil {
		return voucher.Reservation{}, err
	}
	if err := v.Eligible(now, cl.OrderAmount); err != nil {
		return voucher.Reservation{}, err
	}
	res, err := l.admit(ctx, code, cl)
	if err != nil {
		return voucher.Reservation{}, err
	}
	if err := res.Err(); err != nil {
		return voucher.Reservation{}, err
	}
	return l.WriteAdmitted(ctx, code, cl)
}

// admit runs the reserve script for one claim, loading the voucher once if
// Redis does not have it.
func (l *Ledger) admit(ctx context.Context, code string, cl voucher.Claim) (gate.Result, error) {
	if l.gate == nil {
		return 0, errNoGate
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
// the customer's count and used_count, idempotent by orderId. If the database
// rejects or fails the write, the use goes back to Redis and the caller gets the
// mapped error (see Drop for the out-of-stock case); Postgres's constraints stay
// the last guard whatever Redis said.
func (l *Ledger) WriteAdmitted(ctx context.Context, code string, cl voucher.Claim) (voucher.Reservation, error) {
	rs, errs := l.WriteAdmittedMany(ctx, code, []voucher.Claim{cl})
	return rs[0], errs[0]
}

// WriteAdmittedMany is WriteAdmitted for claims that arrived together; they
// are written in one transaction when no guard fires.
func (l *Ledger) WriteAdmittedMany(ctx context.Context, code string, claims []voucher.Claim) ([]voucher.Reservation, []error) {
	rs, errs := l.writer.WriteMany(ctx, code, claims)
	if l.gate == nil {
		return rs, errs
	}
	var released, dropped, unsettled []string
	for i, err := range errs {
		switch {
		case err == nil:
		case !errors.As(err, new(*voucher.Error)):
			// A fault (timeout, the caller left, the connection broke, no
			// connection at all): the write may have committed, or the order
			// may have had its row already, so nothing is given back yet. The
			// use stays held until the database can tell (Settler.Resolve).
			unsettled = append(unsettled, claims[i].OrderID)
			errs[i] = fmt.Errorf("write %s/%s: %w: %w", code, claims[i].OrderID, err, voucher.ErrUnavailable)
		case voucher.ErrorCode(err) == voucher.CodeOutOfStock:
			// The database has no use left: Redis counted one too many. Forget
			// the order without restocking, so Redis converges on the database
			// instead of admitting the next request into the same refusal.
			dropped = append(dropped, claims[i].OrderID)
		default:
			released = append(released, claims[i].OrderID)
		}
	}
	l.settler.Park(code, unsettled)
	bg := context.WithoutCancel(ctx)
	for _, give := range []struct {
		back   func(context.Context, string, ...string) (int, error)
		orders []string
	}{{l.gate.GiveBack, released}, {l.gate.Drop, dropped}} {
		if len(give.orders) == 0 {
			continue
		}
		if _, err := give.back(bg, code, give.orders...); err != nil {
			l.log.Error("give back after failed write", "code", code, "orders", len(give.orders), "err", err)
		}
		l.settler.Settle(bg, code, give.orders...)
	}
	return rs, errs
}

// Confirm confirms a reservation (idempotent). A late payment takes a use again
// when one is left; for a flash voucher that use is taken in Redis first and
// given back there if the database then refuses.
func (l *Ledger) Confirm(ctx context.Context, code, orderID string) (voucher.Reservation, error) {
	r, late, err := l.store.Confirm(ctx, code, orderID)
	if err != nil || !late {
		return r, err
	}
	v, err := l.store.Terms(ctx, code)
	if err != nil {
		return voucher.Reservation{}, err
	}
	mayTake := !v.FlashSale
	heldByUs := false // a Redis use this call took and must give back if the database refuses
	for {
		r, did, err := l.store.LateConfirm(ctx, code, orderID, mayTake)
		switch {
		case heldByUs && err != nil && !errors.As(err, new(*voucher.Error)):
			l.settler.Park(code, []string{orderID}) // a fault: the database decides later
		case heldByUs && err != nil:
			if _, rerr := l.gate.Release(context.WithoutCancel(ctx), code, orderID); rerr != nil {
				l.log.Error("release after late confirm", "code", code, "order", orderID, "err", rerr)
			}
		}
		if v.FlashSale && (did == LateTookUse || heldByUs) {
			// The Redis entry this confirmation relied on may have been given
			// back meanwhile by a release, a sweep or a refused retry of the
			// same order: make sure Redis holds the use the database holds.
			l.settler.Settle(context.WithoutCancel(ctx), code, orderID)
		}
		if err != nil || did != LateNeedsUse {
			return r, err
		}
		res, err := l.admit(ctx, code, voucher.Claim{CustomerID: r.CustomerID, OrderID: orderID})
		if err != nil {
			return voucher.Reservation{}, err
		}
		if res.Err() != nil {
			return voucher.Reservation{}, voucher.ErrReservationExpired
		}
		mayTake, heldByUs = true, res == gate.Reserved
	}
}

// Release gives a reserved use back, in Postgres and then in Redis. Releasing
// twice is fine; a confirmed reservation cannot be released.
func (l *Ledger) Release(ctx context.Context, code, orderID string) error {
	r, released, err := l.store.Release(ctx, code, orderID)
	if err != nil || !released {
		return err
	}
	v, err := l.store.Terms(ctx, code)
	if err != nil || !v.FlashSale || l.gate == nil {
		return err
	}
	// The database has released: a failure here only leaves Redis holding a use
	// (undersell) until the reconciler notices.
	if _, err := l.gate.Release(context.WithoutCancel(ctx), code, r.OrderID); err != nil {
		l.log.Error("release in redis", "code", code, "order", orderID, "err", err)
	}
	l.settler.Settle(context.WithoutCancel(ctx), code, r.OrderID)
	return nil
}
