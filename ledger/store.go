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

// Store is the ledger's Postgres side: the money truth, and the only code that
// speaks SQL. Every state change is a conditional UPDATE (or an INSERT guarded
// by a constraint), so a request that races another one either wins or changes
// nothing. This file holds the vouchers; reservations.go writes reservations
// and redemptions.go moves them through their states.
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

// Remaining returns total_limit - used_count as the database has it now.
func (s *Store) Remaining(ctx context.Context, code string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT total_limit - used_count FROM voucher WHERE code = $1`, code).Scan(&n)
	if err != nil {
		return 0, translate(fmt.Errorf("remaining %s: %w", code, err))
	}
	return n, nil
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
	if errors.As(err, &ve) || errors.Is(err, errOrderTaken) {
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

// activeOrderColumns are the voucher_redemption columns collectActiveOrders reads.
const activeOrderColumns = `order_id, customer_id, created_at`

// collectActiveOrders reads rows of activeOrderColumns.
func collectActiveOrders(rows pgx.Rows) ([]ActiveOrder, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ActiveOrder, error) {
		var o ActiveOrder
		err := row.Scan(&o.OrderID, &o.CustomerID, &o.CreatedAt)
		return o, err
	})
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
				SELECT `+activeOrderColumns+` FROM voucher_redemption
				WHERE voucher_code = $1 AND status IN ('RESERVED', 'CONFIRMED')`, code)
			if err != nil {
				return err
			}
			orders, err = collectActiveOrders(rows)
			return err
		})
	if err != nil {
		return voucher.Voucher{}, nil, translate(fmt.Errorf("snapshot %s: %w", code, err))
	}
	v.StartsAt, v.EndsAt = v.StartsAt.UTC(), v.EndsAt.UTC()
	v.Remaining = v.TotalLimit - v.UsedCount
	return v, orders, nil
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
