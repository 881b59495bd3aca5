package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// errOrderTaken means a concurrent request inserted the same orderId first; the
// caller answers as that request was answered.
var errOrderTaken = errors.New("order id taken by a concurrent request")

// reservationColumns are the columns scanReservation reads, from
// voucher_redemption r joined with voucher v.
const reservationColumns = `r.order_id, r.customer_id, r.voucher_code, r.status, r.discount_amount,
		       r.created_at, r.expires_at, r.order_amount, r.confirmed_at, r.released_at, r.release_reason`

// scanReservation reads one row of reservationColumns: the one mapping from a
// redemption row to a Reservation.
// before are destinations of columns that come first in the row.
func scanReservation(row pgx.Row, before ...any) (voucher.Reservation, error) {
	var r voucher.Reservation
	err := row.Scan(append(before, &r.OrderID, &r.CustomerID, &r.VoucherCode, &r.Status, &r.DiscountAmount,
		&r.CreatedAt, &r.ExpiresAt, &r.OrderAmount, &r.ConfirmedAt, &r.ReleasedAt, &r.ReleaseReason)...)
	if err != nil {
		return voucher.Reservation{}, err
	}
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	for _, t := range []*time.Time{r.ConfirmedAt, r.ReleasedAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return r, nil
}

// Written is the answer to one claim's write: its reservation, or why not.
// replayed marks an answer read from the row an earlier request wrote.
type Written struct {
	Reservation voucher.Reservation
	Err         error
	Replayed    bool
}

// Reservation returns the reservation of orderID under voucher code.
func (s *Store) Reservation(ctx context.Context, code, orderID string) (voucher.Reservation, error) {
	r, err := s.order(ctx, s.pool, orderID, false)
	if err != nil {
		return voucher.Reservation{}, err
	}
	if r.VoucherCode != code {
		return voucher.Reservation{}, voucher.ErrReservationNotFound
	}
	return r, nil
}

// order reads the reservation of orderID, whatever its voucher, optionally
// locking the row.
func (s *Store) order(ctx context.Context, q querier, orderID string, lock bool) (voucher.Reservation, error) {
	sql := `
		SELECT ` + reservationColumns + `
		FROM voucher_redemption r JOIN voucher v ON v.code = r.voucher_code
		WHERE r.order_id = $1`
	if lock {
		sql += ` FOR UPDATE OF r`
	}
	r, err := scanReservation(q.QueryRow(ctx, sql, orderID))
	if errors.Is(err, pgx.ErrNoRows) {
		return voucher.Reservation{}, voucher.ErrReservationNotFound
	}
	if err != nil {
		return voucher.Reservation{}, translate(fmt.Errorf("order %s: %w", orderID, err))
	}
	return r, nil
}

// ordersInSQL is ordersIn's statement: $1 the orderIds.
const ordersInSQL = `
		SELECT ` + reservationColumns + `
		FROM ` + redemptionsOf + `($1::text[])` + redemptionsOfEnd + `
		JOIN voucher v ON v.code = r.voucher_code`

// ordersIn returns the reservations of the given orderIds that exist, whatever
// their voucher, read through q (a pool or a transaction).
func ordersIn(ctx context.Context, q querier, orderIDs []string) (map[string]voucher.Reservation, error) {
	rows, err := q.Query(ctx, ordersInSQL, orderIDs)
	if err != nil {
		return nil, err
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (voucher.Reservation, error) {
		return scanReservation(row)
	})
	if err != nil {
		return nil, err
	}
	found := make(map[string]voucher.Reservation, len(rs))
	for _, r := range rs {
		found[r.OrderID] = r
	}
	return found, nil
}

// Existing answers a reserve whose orderId is already known: the same voucher
// and customer get their reservation back (found true); anything else is an
// error. found false means the orderId is new.
func (s *Store) Existing(ctx context.Context, code string, cl voucher.Claim) (r voucher.Reservation, found bool, err error) {
	r, err = s.order(ctx, s.pool, cl.OrderID, false)
	if errors.Is(err, voucher.ErrReservationNotFound) {
		return voucher.Reservation{}, false, nil
	}
	if err != nil {
		return voucher.Reservation{}, false, err
	}
	return r, true, RetryAnswer(r, code, cl)
}

// ExistingMany is Existing for several claims of voucher code in one read:
// found[i] is false when claims[i]'s orderId is new (out[i] is then empty).
func (s *Store) ExistingMany(ctx context.Context, code string, claims []voucher.Claim) (out []Written, found []bool, err error) {
	ids := make([]string, len(claims))
	for i, cl := range claims {
		ids[i] = cl.OrderID
	}
	rows, err := ordersIn(ctx, s.pool, ids)
	if err != nil {
		return nil, nil, translate(fmt.Errorf("existing orders of %s: %w", code, err))
	}
	out, found = make([]Written, len(claims)), make([]bool, len(claims))
	for i, cl := range claims {
		if r, ok := rows[cl.OrderID]; ok {
			out[i], found[i] = Written{Reservation: r, Err: RetryAnswer(r, code, cl), Replayed: true}, true
		}
	}
	return out, found, nil
}

// RetryAnswer is what a reserve with an orderId that already has row r gets,
// whatever the voucher's terms are now: the same voucher, customer and amount
// replay the stored answer; anything else is a conflict; an order that gave its
// use back is never reserved again.
func RetryAnswer(r voucher.Reservation, code string, cl voucher.Claim) error {
	switch {
	case !r.Same(code, cl):
		return voucher.ErrOrderConflict
	case r.Status == voucher.Released:
		return voucher.ErrReservationReleased
	case r.Status == voucher.Refunded:
		return voucher.ErrReservationRefunded
	}
	return nil
}

// activeOfSQL is ActiveOf's statement: $1 the voucher, $2 the orderIds.
const activeOfSQL = `
		SELECT ` + activeOrderColumns + `
		FROM ` + redemptionsOf + `($2::text[])` + redemptionsOfEnd + `
		WHERE voucher_code = $1 AND status IN ('RESERVED', 'CONFIRMED')`

// ActiveOf returns, of the given orders of voucher code, those that hold a use
// now (RESERVED or CONFIRMED), with their customers.
func (s *Store) ActiveOf(ctx context.Context, code string, orderIDs []string) ([]ActiveOrder, error) {
	rows, err := s.pool.Query(ctx, activeOfSQL, code, orderIDs)
	if err != nil {
		return nil, translate(fmt.Errorf("active orders %s: %w", code, err))
	}
	out, err := collectActiveOrders(rows)
	if err != nil {
		return nil, translate(fmt.Errorf("active orders %s: %w", code, err))
	}
	return out, nil
}

// Reserve is the article's first solution, for standard vouchers: the guarded
// UPDATE and the INSERT in one transaction, the constraints as the last guard.
// A retry with the same orderId gets the same answer (replayed true), decided
// before eligibility, and consumes nothing.
func (s *Store) Reserve(ctx context.Context, code string, cl voucher.Claim) (r voucher.Reservation, replayed bool, err error) {
	return s.insertWithRetry(ctx, code, cl, func() (voucher.Voucher, error) {
		v, err := s.Terms(ctx, code)
		if err != nil {
			return voucher.Voucher{}, err
		}
		now, err := s.Now(ctx)
		if err != nil {
			return voucher.Voucher{}, err
		}
		return v, v.Eligible(now, cl.OrderAmount)
	})
}

// InsertAdmitted writes one claim of v that the gate admitted (see insert for
// what it checks), answering as Existing does if its orderId has a row.
func (s *Store) InsertAdmitted(ctx context.Context, v voucher.Voucher, cl voucher.Claim) (r voucher.Reservation, replayed bool, err error) {
	return s.insertWithRetry(ctx, v.Code, cl, func() (voucher.Voucher, error) { return v, nil })
}

// insertWithRetry writes claim cl of voucher code unless its orderId has a row
// already, which then answers it. terms returns the voucher to write under
// (after any check of its own); when a concurrent request takes the orderId
// first, it starts over, to answer as that request was answered.
func (s *Store) insertWithRetry(ctx context.Context, code string, cl voucher.Claim,
	terms func() (voucher.Voucher, error)) (voucher.Reservation, bool, error) {
	for {
		r, found, err := s.Existing(ctx, code, cl)
		if found || err != nil {
			return r, found, err
		}
		v, err := terms()
		if err != nil {
			return voucher.Reservation{}, false, err
		}
		r, err = s.insert(ctx, v, cl)
		if !errors.Is(err, errOrderTaken) {
			return r, false, err
		}
	}
}

// insert writes one reservation: the redemption row, the customer's count and
// the voucher's used_count, in one transaction. The hot voucher row is touched
// last so that its lock is held as briefly as possible. It checks pause and the
// validity window with the database's clock but not the order amount.
func (s *Store) insert(ctx context.Context, v voucher.Voucher, cl voucher.Claim) (voucher.Reservation, error) {
	amount := cl.OrderAmount
	r := voucher.Reservation{
		OrderID: cl.OrderID, CustomerID: cl.CustomerID, VoucherCode: v.Code,
		Status: voucher.Reserved, DiscountAmount: v.DiscountFor(cl.OrderAmount), OrderAmount: &amount,
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at,
			                                order_amount, discount_amount)
			VALUES ($1, $2, $3, 'RESERVED', now() + $4 * interval '1 microsecond', $5, $6)
			ON CONFLICT (order_id) DO NOTHING
			RETURNING created_at, expires_at`,
			v.Code, cl.CustomerID, cl.OrderID, v.Hold(s.ttl).Microseconds(), cl.OrderAmount, r.DiscountAmount,
		).Scan(&r.CreatedAt, &r.ExpiresAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return errOrderTaken
		}
		if err != nil {
			return err
		}
		if err := takeCustomerUses(ctx, tx, v.Code, map[int64]int{cl.CustomerID: 1}); err != nil {
			return err
		}
		return s.takeVoucherUses(ctx, tx, v.Code, 1, true, reservedEvents{hold: v.Hold(s.ttl)}.add(cl, r.DiscountAmount))
	})
	if err != nil {
		return voucher.Reservation{}, translate(fmt.Errorf("reserve %s/%s: %w", v.Code, cl.OrderID, err))
	}
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	return r, nil
}

// Shut returns why no new reservation of voucher code can be written now, by
// the database's state and clock (paused, not started, ended, no use left), or
// nil when one can.
func (s *Store) Shut(ctx context.Context, code string) (why error, err error) {
	var left int
	var paused, notStarted, ended bool
	err = s.pool.QueryRow(ctx, `
		SELECT total_limit - used_count, paused, now() < starts_at, now() >= ends_at
		FROM voucher WHERE code = $1`, code).Scan(&left, &paused, &notStarted, &ended)
	if err != nil {
		return nil, translate(fmt.Errorf("voucher %s open: %w", code, err))
	}
	switch {
	case paused:
		return voucher.ErrPaused, nil
	case notStarted:
		return voucher.ErrNotStarted, nil
	case ended:
		return voucher.ErrExpired, nil
	case left <= 0:
		return voucher.ErrOutOfStock, nil
	}
	return nil, nil
}

// takeCustomerUses counts more uses for customers (perCustomer: customer ->
// uses) in one statement, guarded by the voucher's CURRENT per_user_limit (read
// here, not from cached terms, so a lowered limit stops new uses at once while
// the uses held above it stay); ALREADY_USED if any would pass it. The usage
// row keeps GREATEST(limit, used_count), so its CHECK stays the last guard.
func takeCustomerUses(ctx context.Context, tx pgx.Tx, code string, perCustomer map[int64]int) error {
	customers := make([]int64, 0, len(perCustomer))
	counts := make([]int32, 0, len(perCustomer))
	for c, n := range perCustomer {
		customers, counts = append(customers, c), append(counts, int32(n))
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO voucher_customer_usage AS u (voucher_code, customer_id, used_count, per_user_limit)
		SELECT v.code, t.c, t.n, v.per_user_limit
		FROM unnest($2::bigint[], $3::int[]) AS t(c, n) JOIN voucher v ON v.code = $1
		WHERE t.n <= v.per_user_limit
		ORDER BY t.c -- one lock order for customers' rows, as the sweeper's
		ON CONFLICT (voucher_code, customer_id)
		DO UPDATE SET used_count = u.used_count + EXCLUDED.used_count,
		              per_user_limit = GREATEST(EXCLUDED.per_user_limit, u.used_count + EXCLUDED.used_count)
		WHERE u.used_count + EXCLUDED.used_count <= EXCLUDED.per_user_limit`,
		code, customers, counts)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != int64(len(customers)) {
		return voucher.ErrAlreadyUsed
	}
	return nil
}

// takeVoucherUses adds n to used_count, guarded by the stock and, when open
// (a new reservation, not a late confirmation), by pause and the validity
// window on the database's clock. In the same statement, once the voucher's
// row is locked (so that a voucher's events are numbered in the order its
// changes commit), it writes the reservation.reserved event of each of
// reserved, and voucher.sold_out when the uses ran out.
func (s *Store) takeVoucherUses(ctx context.Context, tx pgx.Tx, code string, n int, open bool, reserved reservedEvents) error {
	var outOfStock, paused, notStarted, ended bool
	err := tx.QueryRow(ctx, `
		WITH upd AS (
			UPDATE voucher SET used_count = used_count + $2
			WHERE code = $1 AND used_count + $2 <= total_limit
			  AND (NOT $3 OR (NOT paused AND now() >= starts_at AND now() < ends_at))
			RETURNING used_count, total_limit
		), ev AS (
			INSERT INTO voucher_event (type, voucher_code, data)
			SELECT x.type, $1, x.data FROM (
				SELECT 1 AS k, t.i, '`+events.ReservationReserved+`' AS type, jsonb_build_object(
				       'orderId', t.o, 'customerId', t.c, 'orderAmount', t.a, 'discountAmount', t.d,
				       'expiresAt', event_time(now() + $5 * interval '1 microsecond')) AS data
				FROM upd, unnest($6::text[], $7::bigint[], $8::bigint[], $9::bigint[]) WITH ORDINALITY AS t(o, c, a, d, i)
				UNION ALL
				SELECT 2, 0, '`+events.VoucherSoldOut+`', jsonb_build_object('totalLimit', total_limit, 'usedCount', used_count)
				FROM upd WHERE used_count = total_limit
			) x WHERE $4 ORDER BY x.k, x.i
		)
		SELECT NOT EXISTS (SELECT 1 FROM upd), paused, now() < starts_at, now() >= ends_at
		FROM voucher WHERE code = $1`, code, n, open, s.events, reserved.hold.Microseconds(),
		reserved.orders, reserved.customers, reserved.amounts, reserved.discounts,
	).Scan(&outOfStock, &paused, &notStarted, &ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return voucher.ErrVoucherNotFound
	}
	if err != nil {
		return err
	}
	switch {
	case !outOfStock:
		return nil
	case open && paused:
		return voucher.ErrPaused
	case open && notStarted:
		return voucher.ErrNotStarted
	case open && ended:
		return voucher.ErrExpired
	}
	return voucher.ErrOutOfStock
}

// reservedEvents are the reservations a transaction wrote, as columns, for
// their reservation.reserved events, and the hold they were written with
// (their expiresAt).
type reservedEvents struct {
	hold                          time.Duration
	orders                        []string
	customers, amounts, discounts []int64
}

func (e reservedEvents) add(cl voucher.Claim, discount int64) reservedEvents {
	e.orders, e.customers = append(e.orders, cl.OrderID), append(e.customers, cl.CustomerID)
	e.amounts, e.discounts = append(e.amounts, cl.OrderAmount), append(e.discounts, discount)
	return e
}

// giveBackUses returns n uses to the voucher and to the customer.
func giveBackUses(ctx context.Context, tx pgx.Tx, code string, customerID int64, n int) error {
	if _, err := tx.Exec(ctx, `
		UPDATE voucher_customer_usage SET used_count = used_count - $3
		WHERE voucher_code = $1 AND customer_id = $2`, code, customerID, n); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE voucher SET used_count = used_count - $2 WHERE code = $1`, code, n)
	return err
}
