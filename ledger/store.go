package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Store is the ledger's Postgres side: the money truth. Every state change is a
// conditional UPDATE (or an INSERT guarded by a constraint), so a request that
// races another one either wins or changes nothing.
type Store struct {
	pool *pgxpool.Pool
	ttl  time.Duration

	// terms caches the immutable part of each voucher (no route changes a
	// voucher after creation); counters are always read from the database.
	terms sync.Map // code -> voucher.Voucher
}

// NewStore returns a Store on pool whose reservations live for ttl.
func NewStore(pool *pgxpool.Pool, ttl time.Duration) *Store {
	return &Store{pool: pool, ttl: ttl}
}

// errOrderTaken means a concurrent request inserted the same orderId first; the
// caller answers as that request was answered.
var errOrderTaken = errors.New("order id taken by a concurrent request")

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// CreateVoucher inserts v.
func (s *Store) CreateVoucher(ctx context.Context, v voucher.Voucher) (voucher.Voucher, error) {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO voucher (code, discount_amount, min_order_amount, total_limit,
		                     per_user_limit, starts_at, ends_at, flash_sale)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		v.Code, v.DiscountAmount, v.MinOrderAmount, v.TotalLimit,
		v.PerUserLimit, v.StartsAt, v.EndsAt, v.FlashSale)
	if err != nil {
		return voucher.Voucher{}, translate(fmt.Errorf("create voucher %s: %w", v.Code, err))
	}
	return s.Voucher(ctx, v.Code)
}

// Voucher returns the voucher with its live counters.
func (s *Store) Voucher(ctx context.Context, code string) (voucher.Voucher, error) {
	var v voucher.Voucher
	err := s.pool.QueryRow(ctx, `
		SELECT v.code, v.discount_amount, v.min_order_amount, v.total_limit, v.per_user_limit,
		       v.starts_at, v.ends_at, v.flash_sale, v.used_count,
		       count(r.id) FILTER (WHERE r.status = 'RESERVED'),
		       count(r.id) FILTER (WHERE r.status = 'CONFIRMED')
		FROM voucher v
		LEFT JOIN voucher_redemption r ON r.voucher_code = v.code AND r.status IN ('RESERVED', 'CONFIRMED')
		WHERE v.code = $1
		GROUP BY v.code`, code).Scan(
		&v.Code, &v.DiscountAmount, &v.MinOrderAmount, &v.TotalLimit, &v.PerUserLimit,
		&v.StartsAt, &v.EndsAt, &v.FlashSale, &v.UsedCount, &v.ReservedCount, &v.ConfirmedCount)
	if err != nil {
		return voucher.Voucher{}, translate(fmt.Errorf("voucher %s: %w", code, err))
	}
	v.StartsAt, v.EndsAt = v.StartsAt.UTC(), v.EndsAt.UTC()
	v.Remaining = v.TotalLimit - v.UsedCount
	return v, nil
}

// Terms returns the immutable fields of a voucher (no counters), from memory
// after the first read.
func (s *Store) Terms(ctx context.Context, code string) (voucher.Voucher, error) {
	if v, ok := s.terms.Load(code); ok {
		return v.(voucher.Voucher), nil
	}
	v, err := s.Voucher(ctx, code)
	if err != nil {
		return voucher.Voucher{}, err
	}
	v.UsedCount, v.ReservedCount, v.ConfirmedCount, v.Remaining = 0, 0, 0, 0
	s.terms.Store(code, v)
	return v, nil
}

// Now returns the database's clock: it, not any service's, decides time.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, translate(fmt.Errorf("now: %w", err))
	}
	return now, nil
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
		SELECT r.order_id, r.customer_id, r.voucher_code, r.status, v.discount_amount,
		       r.created_at, r.expires_at
		FROM voucher_redemption r JOIN voucher v ON v.code = r.voucher_code
		WHERE r.order_id = $1`
	if lock {
		sql += ` FOR UPDATE OF r`
	}
	var r voucher.Reservation
	err := q.QueryRow(ctx, sql, orderID).Scan(&r.OrderID, &r.CustomerID, &r.VoucherCode,
		&r.Status, &r.DiscountAmount, &r.CreatedAt, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return voucher.Reservation{}, voucher.ErrReservationNotFound
	}
	if err != nil {
		return voucher.Reservation{}, translate(fmt.Errorf("order %s: %w", orderID, err))
	}
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	return r, nil
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
	return r, true, retryAnswer(r, code, cl.CustomerID)
}

// retryAnswer is what a reserve with an orderId that already has row r gets.
func retryAnswer(r voucher.Reservation, code string, customerID int64) error {
	switch {
	case !r.Same(code, customerID):
		return voucher.ErrOrderConflict
	case r.Status == voucher.Released:
		return voucher.ErrReservationReleased
	}
	return nil
}

// Reserve is the article's first solution, for standard vouchers: the guarded
// UPDATE and the INSERT in one transaction, the constraints as the last guard.
// A retry with the same orderId gets the same answer and consumes nothing.
func (s *Store) Reserve(ctx context.Context, code string, cl voucher.Claim) (voucher.Reservation, error) {
	for {
		r, found, err := s.Existing(ctx, code, cl)
		if found || err != nil {
			return r, err
		}
		v, err := s.Terms(ctx, code)
		if err != nil {
			return voucher.Reservation{}, err
		}
		now, err := s.Now(ctx)
		if err != nil {
			return voucher.Reservation{}, err
		}
		if err := v.Eligible(now, cl.OrderAmount); err != nil {
			return voucher.Reservation{}, err
		}
		r, err = s.Insert(ctx, v, cl)
		if errors.Is(err, errOrderTaken) {
			continue // answer as the request that won was answered
		}
		return r, err
	}
}

// Insert writes one reservation: the redemption row, the customer's count and
// the voucher's used_count, in one transaction. The hot voucher row is touched
// last so that its lock is held as briefly as possible. It checks the validity
// window with the database's clock but not the order amount.
func (s *Store) Insert(ctx context.Context, v voucher.Voucher, cl voucher.Claim) (voucher.Reservation, error) {
	r := voucher.Reservation{
		OrderID: cl.OrderID, CustomerID: cl.CustomerID, VoucherCode: v.Code,
		Status: voucher.Reserved, DiscountAmount: v.DiscountAmount,
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, expires_at)
			VALUES ($1, $2, $3, 'RESERVED', now() + $4 * interval '1 microsecond')
			ON CONFLICT (order_id) DO NOTHING
			RETURNING created_at, expires_at`,
			v.Code, cl.CustomerID, cl.OrderID, s.ttl.Microseconds()).Scan(&r.CreatedAt, &r.ExpiresAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return errOrderTaken
		}
		if err != nil {
			return err
		}
		if err := takeCustomerUse(ctx, tx, v.Code, cl.CustomerID, v.PerUserLimit, 1); err != nil {
			return err
		}
		return takeVoucherUses(ctx, tx, v.Code, 1, true)
	})
	if err != nil {
		return voucher.Reservation{}, translate(fmt.Errorf("reserve %s/%s: %w", v.Code, cl.OrderID, err))
	}
	r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
	return r, nil
}

// takeCustomerUse counts n more uses for a customer, guarded by its limit.
func takeCustomerUse(ctx context.Context, tx pgx.Tx, code string, customerID int64, perUserLimit, n int) error {
	tag, err := tx.Exec(ctx, `
		INSERT INTO voucher_customer_usage AS u (voucher_code, customer_id, used_count, per_user_limit)
		VALUES ($1, $2, $4, $3)
		ON CONFLICT (voucher_code, customer_id)
		DO UPDATE SET used_count = u.used_count + $4 WHERE u.used_count + $4 <= u.per_user_limit`,
		code, customerID, perUserLimit, n)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return voucher.ErrAlreadyUsed
	}
	return nil
}

// takeVoucherUses adds n to used_count, guarded by the stock and, when
// inWindow, by the validity window on the database's clock.
func takeVoucherUses(ctx context.Context, tx pgx.Tx, code string, n int, inWindow bool) error {
	var outOfStock, notStarted, ended bool
	err := tx.QueryRow(ctx, `
		WITH upd AS (
			UPDATE voucher SET used_count = used_count + $2
			WHERE code = $1 AND used_count + $2 <= total_limit
			  AND (NOT $3 OR (now() >= starts_at AND now() < ends_at))
			RETURNING 1
		)
		SELECT NOT EXISTS (SELECT 1 FROM upd), now() < starts_at, now() >= ends_at
		FROM voucher WHERE code = $1`, code, n, inWindow).Scan(&outOfStock, &notStarted, &ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return voucher.ErrVoucherNotFound
	}
	if err != nil {
		return err
	}
	switch {
	case !outOfStock:
		return nil
	case inWindow && notStarted:
		return voucher.NotEligible(voucher.ReasonNotStarted, "the voucher is not valid yet")
	case inWindow && ended:
		return voucher.NotEligible(voucher.ReasonExpired, "the voucher has expired")
	}
	return voucher.ErrOutOfStock
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

// errLate means the reservation is not live (expired or released): the
// confirmation has to go through LateConfirm.
var errLate = errors.New("reservation expired or released")

// errNeedsUse means a late confirmation must take a use anew and the caller did
// not allow it yet (a flash voucher takes it in Redis first).
var errNeedsUse = errors.New("late confirmation needs a new use")

// Confirm marks a RESERVED reservation CONFIRMED; the database's clock decides
// expiry in the same UPDATE. An already confirmed one is answered as it is
// (idempotent). A reservation that is not live returns errLate with its row.
func (s *Store) Confirm(ctx context.Context, code, orderID string) (voucher.Reservation, error) {
	var r voucher.Reservation
	err := s.pool.QueryRow(ctx, `
		UPDATE voucher_redemption r SET status = 'CONFIRMED', updated_at = now()
		FROM voucher v
		WHERE v.code = r.voucher_code AND r.order_id = $1 AND r.voucher_code = $2
		  AND r.status = 'RESERVED' AND r.expires_at > now()
		RETURNING r.order_id, r.customer_id, r.voucher_code, r.status, v.discount_amount,
		          r.created_at, r.expires_at`, orderID, code).Scan(
		&r.OrderID, &r.CustomerID, &r.VoucherCode, &r.Status, &r.DiscountAmount, &r.CreatedAt, &r.ExpiresAt)
	if err == nil {
		r.CreatedAt, r.ExpiresAt = r.CreatedAt.UTC(), r.ExpiresAt.UTC()
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return voucher.Reservation{}, translate(fmt.Errorf("confirm %s/%s: %w", code, orderID, err))
	}
	r, err = s.Reservation(ctx, code, orderID)
	if err != nil || r.Status == voucher.Confirmed {
		return r, err
	}
	return r, errLate
}

// LateConfirm confirms a reservation whose hold ran out before the payment
// arrived. An expired reservation the sweeper has not reached yet still holds
// its use, so it is confirmed as it stands (releasing it and taking a use again
// would net to the same counts). A released one takes a use again through the
// stock and per-customer guards, else RESERVATION_EXPIRED; it does so only when
// mayTake, else it returns errNeedsUse. The validity window is not checked
// again: the order was placed inside it. took reports a use taken anew.
func (s *Store) LateConfirm(ctx context.Context, code, orderID string, mayTake bool) (r voucher.Reservation, took bool, err error) {
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
				return errNeedsUse
			}
			v, err := s.Terms(ctx, code)
			if err != nil {
				return err
			}
			if err := takeCustomerUse(ctx, tx, code, r.CustomerID, v.PerUserLimit, 1); err != nil {
				return lateError(err)
			}
			if err := takeVoucherUses(ctx, tx, code, 1, false); err != nil {
				return lateError(err)
			}
			took = true
		}
		_, err = tx.Exec(ctx, `
			UPDATE voucher_redemption SET status = 'CONFIRMED', updated_at = now()
			WHERE order_id = $1`, orderID)
		r.Status = voucher.Confirmed
		return err
	})
	if errors.Is(err, errNeedsUse) {
		return r, false, err
	}
	if err != nil {
		return voucher.Reservation{}, false, translate(fmt.Errorf("late confirm %s/%s: %w", code, orderID, err))
	}
	return r, took, nil
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
		err := tx.QueryRow(ctx, `
			UPDATE voucher_redemption SET status = 'RELEASED', updated_at = now()
			WHERE order_id = $1 AND voucher_code = $2 AND status = 'RESERVED'
			RETURNING order_id, customer_id, voucher_code, status, created_at, expires_at`,
			orderID, code).Scan(&r.OrderID, &r.CustomerID, &r.VoucherCode, &r.Status, &r.CreatedAt, &r.ExpiresAt)
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

// querier is what both a pool and a transaction offer for reads.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// translate maps driver errors to the domain's at the edge of the store: a
// constraint that fired becomes the business error it guards against, and
// anything else stays a fault (a 503 for the client, a log line for us).
func translate(err error) error {
	if err == nil {
		return nil
	}
	var ve *voucher.Error
	if errors.As(err, &ve) || errors.Is(err, errOrderTaken) || errors.Is(err, errNeedsUse) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return voucher.ErrVoucherNotFound
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23514" && pe.ConstraintName == "ck_used":
			return voucher.ErrOutOfStock
		case pe.Code == "23514" && pe.ConstraintName == "ck_usage_limit":
			return voucher.ErrAlreadyUsed
		case pe.Code == "23505" && pe.ConstraintName == "uq_order":
			return errOrderTaken
		case pe.Code == "23505" && pe.ConstraintName == "voucher_pkey":
			return voucher.ErrVoucherExists
		case pe.Code == "23503":
			return voucher.ErrVoucherNotFound
		}
	}
	return err
}

// ActiveOrder is a reservation that holds a use (RESERVED or CONFIRMED).
type ActiveOrder struct {
	OrderID    string
	CustomerID int64
	CreatedAt  time.Time
}

// Snapshot reads, in one consistent view, a voucher's counters and the orders
// that hold its uses: what Redis is loaded from.
func (s *Store) Snapshot(ctx context.Context, code string) (v voucher.Voucher, orders []ActiveOrder, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			err := tx.QueryRow(ctx, `
				SELECT code, discount_amount, min_order_amount, total_limit, per_user_limit,
				       starts_at, ends_at, flash_sale, used_count
				FROM voucher WHERE code = $1`, code).Scan(
				&v.Code, &v.DiscountAmount, &v.MinOrderAmount, &v.TotalLimit, &v.PerUserLimit,
				&v.StartsAt, &v.EndsAt, &v.FlashSale, &v.UsedCount)
			if err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `
				SELECT order_id, customer_id, created_at FROM voucher_redemption
				WHERE voucher_code = $1 AND status IN ('RESERVED', 'CONFIRMED')`, code)
			if err != nil {
				return err
			}
			orders, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ActiveOrder, error) {
				var o ActiveOrder
				err := row.Scan(&o.OrderID, &o.CustomerID, &o.CreatedAt)
				return o, err
			})
			return err
		})
	if err != nil {
		return voucher.Voucher{}, nil, translate(fmt.Errorf("snapshot %s: %w", code, err))
	}
	v.StartsAt, v.EndsAt = v.StartsAt.UTC(), v.EndsAt.UTC()
	v.Remaining = v.TotalLimit - v.UsedCount
	return v, orders, nil
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

// ActiveOf returns, of the given orders of voucher code, those that hold a use
// now (RESERVED or CONFIRMED), with their customers.
func (s *Store) ActiveOf(ctx context.Context, code string, orderIDs []string) ([]ActiveOrder, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT order_id, customer_id, created_at FROM voucher_redemption
		WHERE voucher_code = $1 AND order_id = ANY($2) AND status IN ('RESERVED', 'CONFIRMED')`, code, orderIDs)
	if err != nil {
		return nil, translate(fmt.Errorf("active orders %s: %w", code, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ActiveOrder, error) {
		var o ActiveOrder
		err := row.Scan(&o.OrderID, &o.CustomerID, &o.CreatedAt)
		return o, err
	})
	if err != nil {
		return nil, translate(fmt.Errorf("active orders %s: %w", code, err))
	}
	return out, nil
}

// LiveFlashVouchers lists the flash vouchers whose Redis state still matters:
// those that have not ended more than a day ago (Redis keys live until then).
func (s *Store) LiveFlashVouchers(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT code FROM voucher
		WHERE flash_sale AND ends_at + interval '1 day' > now()
		ORDER BY code`)
	if err != nil {
		return nil, translate(fmt.Errorf("live flash vouchers: %w", err))
	}
	codes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, translate(fmt.Errorf("live flash vouchers: %w", err))
	}
	return codes, nil
}

// WithVoucherLock runs fn while holding a session advisory lock for code, so
// that one ledger at a time reconciles a voucher. fn runs outside any
// transaction: it talks to Redis. A caller waiting for the lock does not hold
// a pooled connection meanwhile (it polls pg_try_advisory_lock), so waiters
// can never starve the holder of the connections it needs.
func (s *Store) WithVoucherLock(ctx context.Context, code string, fn func() error) error {
	const key = `hashtextextended('flashgate:reconcile:' || $1, 0)`
	for {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return translate(fmt.Errorf("lock %s: %w", code, err))
		}
		var locked bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+key+`)`, code).Scan(&locked); err != nil {
			conn.Release()
			return translate(fmt.Errorf("lock %s: %w", code, err))
		}
		if !locked {
			conn.Release()
			select {
			case <-ctx.Done():
				return fmt.Errorf("lock %s: %w", code, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		defer conn.Release()
		defer func() {
			if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+key+`)`, code); err != nil {
				// A lock we cannot release dies with its connection.
				conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}()
		return fn()
	}
}
