package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Confirm marks a RESERVED reservation CONFIRMED; the database's clock decides
// expiry in the same UPDATE. An already confirmed one is answered as it is
// (idempotent). late reports a reservation that is not live (expired or
// released), returned as it stands: its confirmation goes through LateConfirm.
func (s *Store) Confirm(ctx context.Context, code, orderID string) (r voucher.Reservation, late bool, err error) {
	r, err = scanReservation(s.pool.QueryRow(ctx, `
		UPDATE voucher_redemption r SET status = 'CONFIRMED', updated_at = now()
		FROM voucher v
		WHERE v.code = r.voucher_code AND r.order_id = $1 AND r.voucher_code = $2
		  AND r.status = 'RESERVED' AND r.expires_at > now()
		RETURNING `+reservationColumns, orderID, code))
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
	return r, true, nil
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
// would net to the same counts). A released one takes a use again through the
// stock and per-customer guards, else RESERVATION_EXPIRED; it does so only when
// mayTake, else it changes nothing and answers LateNeedsUse with the row. The
// validity window is not checked again: the order was placed inside it.
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
		_, err = tx.Exec(ctx, `
			UPDATE voucher_redemption SET status = 'CONFIRMED', updated_at = now()
			WHERE order_id = $1`, orderID)
		r.Status = voucher.Confirmed
		return err
	})
	if err != nil {
		return voucher.Reservation{}, LateConfirmed, translate(fmt.Errorf("late confirm %s/%s: %w", code, orderID, err))
	}
	return r, did, nil
}

// takeUseAgain takes a use for a released reservation being confirmed late,
// through the per-customer and stock guards.
func (s *Store) takeUseAgain(ctx context.Context, tx pgx.Tx, code string, customerID int64) error {
	v, err := s.Terms(ctx, code)
	if err != nil {
		return err
	}
	if err := takeCustomerUse(ctx, tx, code, customerID, v.PerUserLimit, 1); err != nil {
		return lateError(err)
	}
	if err := takeVoucherUses(ctx, tx, code, 1, false); err != nil {
		return lateError(err)
	}
	return nil
}

// lateError maps a failed guard during a late confirmation to RESERVATION_EXPIRED.
func lateError(err error) error {
	switch voucher.ErrorCode(err) {
	case voucher.CodeOutOfStock, voucher.CodeAlreadyUsed:
		return voucher.ErrReservationExpired
	}
	return err
}

// Release gives a RESERVED reservation's use back to the voucher and the
// customer. released is false when it was already released (the call is then a
// no-op); a confirmed reservation cannot be released.
func (s *Store) Release(ctx context.Context, code, orderID string) (r voucher.Reservation, released bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		r, err = scanReservation(tx.QueryRow(ctx, `
			UPDATE voucher_redemption r SET status = 'RELEASED', updated_at = now()
			FROM voucher v
			WHERE v.code = r.voucher_code AND r.order_id = $1 AND r.voucher_code = $2
			  AND r.status = 'RESERVED'
			RETURNING `+reservationColumns, orderID, code))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		released = true
		return giveBackUses(ctx, tx, code, r.CustomerID, 1)
	})
	if err != nil {
		return voucher.Reservation{}, false, translate(fmt.Errorf("release %s/%s: %w", code, orderID, err))
	}
	if released {
		return r, true, nil
	}
	r, err = s.Reservation(ctx, code, orderID)
	switch {
	case err != nil:
		return voucher.Reservation{}, false, err
	case r.Status == voucher.Confirmed:
		return r, false, voucher.ErrAlreadyConfirmed
	case r.Status == voucher.Reserved:
		// Released and taken again by a late confirm in between: try once more.
		return s.Release(ctx, code, orderID)
	}
	return r, false, nil
}

// ExpiredOrder is a reservation the sweeper released.
type ExpiredOrder struct {
	VoucherCode string
	CustomerID  int64
	OrderID     string
	FlashSale   bool
}

// ExpireBatch releases up to limit RESERVED reservations whose expires_at has
// passed on the database's clock, in one statement: the rows are locked with
// SKIP LOCKED (so two sweepers never take the same row, and a confirmation in
// progress is left alone), used_count drops once per voucher and each
// customer's count once per customer.
func (s *Store) ExpireBatch(ctx context.Context, limit int) ([]ExpiredOrder, error) {
	rows, err := s.pool.Query(ctx, `
		WITH due AS (
			SELECT id FROM voucher_redemption
			WHERE status = 'RESERVED' AND expires_at < now()
			ORDER BY expires_at
			LIMIT $1
			FOR UPDATE SKIP LOCKED
		), released AS (
			UPDATE voucher_redemption r SET status = 'RELEASED', updated_at = now()
			FROM due WHERE r.id = due.id AND r.status = 'RESERVED'
			RETURNING r.voucher_code, r.customer_id, r.order_id
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
		), per_voucher AS (
			-- The hot voucher rows last, after the customers' locks.
			UPDATE voucher v SET used_count = v.used_count - x.n
			FROM (SELECT voucher_code, count(*)::int AS n FROM released GROUP BY voucher_code) x
			WHERE v.code = x.voucher_code AND (SELECT count(*) FROM per_customer) >= 0
			RETURNING 1
		)
		SELECT r.voucher_code, r.customer_id, r.order_id, v.flash_sale
		FROM released r JOIN voucher v ON v.code = r.voucher_code`, limit)
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
