package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Confirm marks a RESERVED reservation CONFIRMED; the database's clock decides
// expiry in the same UPDATE. An already confirmed one is answered as it is
// (idempotent); a refunded or cancelled one is refused (see unconfirmable).
// late reports a reservation whose hold ran out (expired, swept or not),
// returned as it stands: its confirmation goes through LateConfirm.
func (s *Store) Confirm(ctx context.Context, code, orderID string) (r voucher.Reservation, late bool, err error) {
	r, err = scanReservation(s.pool.QueryRow(ctx, `
		WITH r AS (
			UPDATE voucher_redemption r SET status = 'CONFIRMED', confirmed_at = now(), updated_at = now()
			FROM voucher v
			WHERE v.code = r.voucher_code AND r.order_id = $1 AND r.voucher_code = $2
			  AND r.status = 'RESERVED' AND r.expires_at > now()
			RETURNING `+reservationColumns+`
		), ev AS (
			INSERT INTO voucher_event (type, voucher_code, data)
			SELECT '`+events.ReservationConfirmed+`', voucher_code, jsonb_build_object(
			       'orderId', order_id, 'customerId', customer_id, 'orderAmount', order_amount,
			       'discountAmount', discount_amount, 'late', false)
			FROM r WHERE $3
		)
		SELECT `+reservationColumns+` FROM r`, orderID, code, s.events))
	if err == nil {
		return r, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return voucher.Reservation{}, false, translate(fmt.Errorf("confirm %s/%s: %w", code, orderID, err))
	}
	r, err = s.Reservation(ctx, code, orderID)
	if err != nil || r.Status == voucher.Confirmed {
		return r, false, err
	}
	if err := unconfirmable(r); err != nil {
		return voucher.Reservation{}, false, err
	}
	return r, true, nil
}

// unconfirmable refuses the confirmation of a reservation whose ending is
// final: a refund, or an explicit release (DELETE). Only a hold that ran out
// may still be paid late.
func unconfirmable(r voucher.Reservation) error {
	switch {
	case r.Status == voucher.Refunded:
		return voucher.ErrReservationRefunded
	case r.Status == voucher.Released && r.ReleaseReason != nil && *r.ReleaseReason == voucher.ReasonCancelled:
		return voucher.ErrReservationReleased
	}
	return nil
}

// LateOutcome is what LateConfirm did.
type LateOutcome int

const (
	// LateConfirmed: confirmed with the use it held (or confirmed already).
	LateConfirmed LateOutcome = iota
	// LateTookUse: confirmed, with a use taken anew.
	LateTookUse
	// LateNeedsUse: nothing changed; the confirmation must take a use anew and
	// the caller did not allow it yet (a flash voucher takes it in Redis first).
	LateNeedsUse
)

// LateConfirm confirms a reservation whose hold ran out before the payment
// arrived. An expired reservation the sweeper has not reached yet still holds
// its use, so it is confirmed as it stands (releasing it and taking a use again
// would net to the same counts). One the sweeper released takes a use again
// through the stock and per-customer guards, else RESERVATION_EXPIRED naming
// the cause; it does so only when mayTake, else it changes nothing and answers
// LateNeedsUse with the row. Neither pause nor the validity window is checked
// again: the order was placed inside it. A cancelled or refunded reservation
// is refused (unconfirmable).
func (s *Store) LateConfirm(ctx context.Context, code, orderID string, mayTake bool) (r voucher.Reservation, did LateOutcome, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		r, err = s.order(ctx, tx, orderID, true)
		if err != nil {
			return err
		}
		if r.VoucherCode != code {
			return voucher.ErrReservationNotFound
		}
		if err := unconfirmable(r); err != nil {
			return err
		}
		switch r.Status {
		case voucher.Confirmed:
			return nil
		case voucher.Released:
			if !mayTake {
				did = LateNeedsUse
				return nil
			}
			if err := s.takeUseAgain(ctx, tx, code, r.CustomerID); err != nil {
				return err
			}
			did = LateTookUse
		}
		err = tx.QueryRow(ctx, `
			UPDATE voucher_redemption
			SET status = 'CONFIRMED', confirmed_at = now(), updated_at = now(),
			    released_at = NULL, release_reason = NULL
			WHERE order_id = $1
			RETURNING confirmed_at`, orderID).Scan(&r.ConfirmedAt)
		if err != nil {
			return err
		}
		r.Status, r.ReleasedAt, r.ReleaseReason = voucher.Confirmed, nil, nil
		*r.ConfirmedAt = r.ConfirmedAt.UTC()
		return s.insertEvent(ctx, tx, events.ReservationConfirmed, code, confirmedData{
			OrderID: r.OrderID, CustomerID: r.CustomerID, OrderAmount: r.OrderAmount,
			DiscountAmount: r.DiscountAmount, Late: true, TookUse: did == LateTookUse,
		})
	})
	if err != nil {
		return voucher.Reservation{}, LateConfirmed, translate(fmt.Errorf("late confirm %s/%s: %w", code, orderID, err))
	}
	return r, did, nil
}

// takeUseAgain takes a use for a released reservation being confirmed late,
// through the per-customer (current limit) and stock guards.
func (s *Store) takeUseAgain(ctx context.Context, tx pgx.Tx, code string, customerID int64) error {
	if err := takeCustomerUses(ctx, tx, code, map[int64]int{customerID: 1}); err != nil {
		return lateError(err)
	}
	if err := s.takeVoucherUses(ctx, tx, code, 1, false, reservedEvents{}); err != nil {
		return lateError(err)
	}
	return nil
}

// The RESERVATION_EXPIRED answers of a late confirmation that cannot take a
// use again, one per cause.
var (
	ErrLateNoUseLeft = voucher.Errorf(voucher.CodeReservationExpired,
		"the reservation expired and there is no use left")
	ErrLateOverLimit = voucher.Errorf(voucher.CodeReservationExpired,
		"the reservation expired and the customer's limit is reached: the customer holds as many uses as perUserLimit allows")
)

// lateError maps a failed guard during a late confirmation to
// RESERVATION_EXPIRED with its cause; anything else is returned as it is.
func lateError(err error) error {
	switch voucher.ErrorCode(err) {
	case voucher.CodeOutOfStock:
		return ErrLateNoUseLeft
	case voucher.CodeAlreadyUsed:
		return ErrLateOverLimit
	}
	return err
}

// Release cancels a RESERVED reservation (RELEASED, reason CANCELLED: final)
// and gives its use back to the voucher and the customer. released is false
// when it had given its use back already, released or refunded (the call is
// then a no-op for the counts); a confirmed reservation cannot be released.
// A hold the sweeper released (reason EXPIRED) is cancelled all the same: its
// reason becomes CANCELLED, with its event, so that a late payment can no
// longer take a use again for an order the shop cancelled.
func (s *Store) Release(ctx context.Context, code, orderID string) (r voucher.Reservation, released bool, err error) {
	r, released, err = s.endHold(ctx, code, orderID, voucher.Reserved, voucher.Released, voucher.ReasonCancelled)
	if err != nil || released {
		return r, released, err
	}
	switch {
	case r.Status == voucher.Confirmed:
		return r, false, voucher.ErrAlreadyConfirmed
	case r.Status == voucher.Reserved:
		// Released and taken again by a late confirm in between: try once more.
		return s.Release(ctx, code, orderID)
	case r.Status == voucher.Released && r.ReleaseReason != nil && *r.ReleaseReason == voucher.ReasonExpiredHold:
		cancelled, err := s.cancelExpired(ctx, code, orderID)
		if err != nil {
			return voucher.Reservation{}, false, err
		}
		if !cancelled {
			// A late confirm took the row first: answer as it is now.
			return s.Release(ctx, code, orderID)
		}
		reason := voucher.ReasonCancelled
		r.ReleaseReason = &reason
	}
	return r, false, nil
}

// cancelExpired records the cancel of a hold the sweeper released: reason
// EXPIRED becomes CANCELLED (final), with a reservation.released event of
// reason CANCELLED. Its use went back already, so no count changes. It reports
// false when the row was not an expired release any more (a late confirm
// locked it first).
func (s *Store) cancelExpired(ctx context.Context, code, orderID string) (bool, error) {
	var n int
	err := s.pool.QueryRow(ctx, `
		WITH r AS (
			UPDATE voucher_redemption SET release_reason = '`+voucher.ReasonCancelled+`', updated_at = now()
			WHERE order_id = $1 AND voucher_code = $2
			  AND status = 'RELEASED' AND release_reason = '`+voucher.ReasonExpiredHold+`'
			RETURNING order_id, customer_id, discount_amount
		), ev AS (
			INSERT INTO voucher_event (type, voucher_code, data)
			SELECT '`+events.ReservationReleased+`', $2, jsonb_build_object(
			       'orderId', order_id, 'customerId', customer_id, 'discountAmount', discount_amount,
			       'reason', '`+voucher.ReasonCancelled+`')
			FROM r WHERE $3
		)
		SELECT count(*) FROM r`, orderID, code, s.events).Scan(&n)
	if err != nil {
		return false, translate(fmt.Errorf("cancel expired %s/%s: %w", code, orderID, err))
	}
	return n == 1, nil
}

// Refund pays a CONFIRMED reservation back: REFUNDED (reason REFUNDED), and
// its use goes back to the voucher and the customer. refunded is false when it
// was refunded already (the call is then a no-op); a reservation that is not
// confirmed is NOT_CONFIRMED. Concurrent refunds of one order give one use back:
// only the UPDATE that finds the row CONFIRMED changes it.
func (s *Store) Refund(ctx context.Context, code, orderID string) (r voucher.Reservation, refunded bool, err error) {
	r, refunded, err = s.endHold(ctx, code, orderID, voucher.Confirmed, voucher.Refunded, voucher.ReasonRefunded)
	if err != nil || refunded {
		return r, refunded, err
	}
	switch r.Status {
	case voucher.Refunded:
		return r, false, nil
	case voucher.Confirmed:
		// Confirmed late between the UPDATE and the read: try once more.
		return s.Refund(ctx, code, orderID)
	}
	return voucher.Reservation{}, false, voucher.ErrNotConfirmed
}

// endHold moves orderID's reservation from status from to status to with the
// given release reason and gives its use back to the voucher and the customer,
// in one transaction. When the row was not in status from, ended is false and
// r is the row as it is now (for the caller to answer from).
func (s *Store) endHold(ctx context.Context, code, orderID string, from, to voucher.Status, reason string) (r voucher.Reservation, ended bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		r, err = scanReservation(tx.QueryRow(ctx, `
			UPDATE voucher_redemption r
			SET status = $4, release_reason = $5, released_at = now(), updated_at = now()
			WHERE r.order_id = $1 AND r.voucher_code = $2 AND r.status = $3
			RETURNING `+reservationColumns, orderID, code, from, to, reason))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ended = true
		if err := giveBackUses(ctx, tx, code, r.CustomerID, 1); err != nil {
			return err
		}
		typ := events.ReservationReleased
		if to == voucher.Refunded {
			typ = events.ReservationRefunded
		}
		// After the voucher's row is locked: see takeVoucherUses.
		return s.insertEvent(ctx, tx, typ, code, endedData{
			OrderID: r.OrderID, CustomerID: r.CustomerID, DiscountAmount: r.DiscountAmount, Reason: reason,
		})
	})
	if err != nil {
		return voucher.Reservation{}, false, translate(fmt.Errorf("%s/%s to %s: %w", code, orderID, to, err))
	}
	if ended {
		return r, true, nil
	}
	r, err = s.Reservation(ctx, code, orderID)
	return r, false, err
}

// FinishedOrders returns the orders of voucher code whose row gave its use
// back (RELEASED or REFUNDED): what Redis records in done, so that a retry of
// one reaches the ledger.
func (s *Store) FinishedOrders(ctx context.Context, code string) ([]ActiveOrder, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+activeOrderColumns+` FROM voucher_redemption
		WHERE voucher_code = $1 AND status IN ('RELEASED', 'REFUNDED')`, code)
	if err != nil {
		return nil, translate(fmt.Errorf("finished orders %s: %w", code, err))
	}
	out, err := collectActiveOrders(rows)
	if err != nil {
		return nil, translate(fmt.Errorf("finished orders %s: %w", code, err))
	}
	return out, nil
}

// ExpiredOrder is a reservation the sweeper released.
type ExpiredOrder struct {
	VoucherCode string
	CustomerID  int64
	OrderID     string
	FlashSale   bool
}

// DueExpired lists up to limit RESERVED reservations whose expires_at has
// passed on the database's clock, oldest first, without locking them: the
// candidates of one ExpireBatch. A sweeper knows them before it releases, so
// that a release whose outcome it could not learn (a deadline that ended the
// wait after Postgres committed) is settled from the database, order by order.
func (s *Store) DueExpired(ctx context.Context, limit int) ([]ExpiredOrder, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT r.voucher_code, r.customer_id, r.order_id, v.flash_sale
		FROM voucher_redemption r JOIN voucher v ON v.code = r.voucher_code
		WHERE r.status = 'RESERVED' AND r.expires_at < now()
		ORDER BY r.expires_at
		LIMIT $1`, limit)
	if err != nil {
		return nil, translate(fmt.Errorf("expired orders: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ExpiredOrder, error) {
		var o ExpiredOrder
		err := row.Scan(&o.VoucherCode, &o.CustomerID, &o.OrderID, &o.FlashSale)
		return o, err
	})
	if err != nil {
		return nil, translate(fmt.Errorf("expired orders: %w", err))
	}
	return out, nil
}

// ExpireBatch releases those of due (DueExpired) that are still RESERVED and
// past their expires_at on the database's clock, in one statement: the rows
// are locked with SKIP LOCKED (so two sweepers never take the same row, and a
// confirmation in progress is left alone), used_count drops once per voucher
// and each customer's count once per customer. It returns the orders it
// released.
func (s *Store) ExpireBatch(ctx context.Context, due []ExpiredOrder) ([]ExpiredOrder, error) {
	ids := make([]string, len(due))
	for i, o := range due {
		ids[i] = o.OrderID
	}
	rows, err := s.pool.Query(ctx, `
		WITH due AS (
			SELECT id FROM voucher_redemption
			WHERE order_id = ANY($1::text[]) AND status = 'RESERVED' AND expires_at < now()
			ORDER BY expires_at
			FOR UPDATE SKIP LOCKED
		), released AS (
			UPDATE voucher_redemption r
			SET status = 'RELEASED', release_reason = 'EXPIRED', released_at = now(), updated_at = now()
			FROM due WHERE r.id = due.id AND r.status = 'RESERVED'
			RETURNING r.voucher_code, r.customer_id, r.order_id, r.discount_amount
		), customers AS (
			-- Lock the customers' rows in one fixed order (as every writer
			-- does) so that two sweeps can never deadlock on them.
			SELECT 1 FROM voucher_customer_usage u
			WHERE (u.voucher_code, u.customer_id) IN (SELECT voucher_code, customer_id FROM released)
			ORDER BY u.voucher_code, u.customer_id
			FOR UPDATE
		), per_customer AS (
			UPDATE voucher_customer_usage u SET used_count = u.used_count - x.n
			FROM (SELECT voucher_code, customer_id, count(*)::int AS n FROM released
			      GROUP BY voucher_code, customer_id) x
			WHERE u.voucher_code = x.voucher_code AND u.customer_id = x.customer_id
			  AND (SELECT count(*) FROM customers) >= 0
			RETURNING 1
		), vouchers AS (
			-- The hot voucher rows last, after the customers' locks, in one
			-- fixed order too: two sweeps releasing orders of the same
			-- vouchers never deadlock on them.
			SELECT 1 FROM voucher v
			WHERE v.code IN (SELECT voucher_code FROM released) AND (SELECT count(*) FROM per_customer) >= 0
			ORDER BY v.code
			FOR NO KEY UPDATE
		), per_voucher AS (
			UPDATE voucher v SET used_count = v.used_count - x.n
			FROM (SELECT voucher_code, count(*)::int AS n FROM released GROUP BY voucher_code) x
			WHERE v.code = x.voucher_code AND (SELECT count(*) FROM vouchers) >= 0
			RETURNING 1
		), ev AS (
			-- The events last, once the voucher rows are locked (takeVoucherUses).
			INSERT INTO voucher_event (type, voucher_code, data)
			SELECT '`+events.ReservationReleased+`', voucher_code, jsonb_build_object(
			       'orderId', order_id, 'customerId', customer_id, 'discountAmount', discount_amount,
			       'reason', 'EXPIRED')
			FROM released WHERE $2 AND (SELECT count(*) FROM per_voucher) >= 0
			ORDER BY voucher_code, order_id
		)
		SELECT r.voucher_code, r.customer_id, r.order_id, v.flash_sale
		FROM released r JOIN voucher v ON v.code = r.voucher_code`, ids, s.events)
	if err != nil {
		return nil, translate(fmt.Errorf("expire: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ExpiredOrder, error) {
		var o ExpiredOrder
		err := row.Scan(&o.VoucherCode, &o.CustomerID, &o.OrderID, &o.FlashSale)
		return o, err
	})
	if err != nil {
		return nil, translate(fmt.Errorf("expire: %w", err))
	}
	return out, nil
}
