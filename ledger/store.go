package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Store is the ledger's Postgres side: the money truth, and the only code that
// speaks SQL. Every state change is a conditional UPDATE (or an INSERT guarded
// by a constraint), so a request that races another one either wins or changes
// nothing. This file holds the vouchers; reservations.go writes reservations
// and redemptions.go moves them through their states.
type Store struct {
	pool   *pgxpool.Pool
	ttl    time.Duration
	now    func() time.Time // ages the terms cache
	events bool             // write the outbox's events (EVENTS=off: only to measure what they cost)

	// terms caches each voucher's terms for at most termsTTL: an admin change
	// reaches every ledger within that, and at once the one that made it (and
	// those that hear of it: ForgetTerms). Counters are always read from the
	// database.
	terms   sync.Map // code -> cachedTerms
	forgets sync.Map // code -> *atomic.Uint64, its ForgetTerms calls: a read that overlapped one is not cached
}

// termsTTL is how long Terms keeps a voucher's terms.
const termsTTL = time.Second

type cachedTerms struct {
	v  voucher.Voucher
	at time.Time
}

// NewStore returns a Store on pool whose reservations live for ttl.
func NewStore(pool *pgxpool.Pool, ttl time.Duration) *Store {
	return &Store{pool: pool, ttl: ttl, now: time.Now, events: true}
}

// WriteEvents turns the outbox's events on (the default) or off. Off is for
// measuring their cost only: nothing is then told of the changes.
func (s *Store) WriteEvents(on bool) { s.events = on }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// termsColumns are the voucher columns scanTerms reads.
const termsColumns = `code, discount_amount, min_order_amount, total_limit, per_user_limit,
		       starts_at, ends_at, flash_sale, paused, used_count`

// scanTerms reads one row of termsColumns: the one mapping from a voucher row
// to a Voucher's terms (used_count included, the other counters not).
func scanTerms(row pgx.Row) (voucher.Voucher, error) {
	var v voucher.Voucher
	err := row.Scan(&v.Code, &v.DiscountAmount, &v.MinOrderAmount, &v.TotalLimit, &v.PerUserLimit,
		&v.StartsAt, &v.EndsAt, &v.FlashSale, &v.Paused, &v.UsedCount)
	if err != nil {
		return voucher.Voucher{}, err
	}
	v.StartsAt, v.EndsAt = v.StartsAt.UTC(), v.EndsAt.UTC()
	v.Remaining = v.TotalLimit - v.UsedCount
	return v, nil
}

// viewSelect reads vouchers as the admin routes show them: terms, counters, and
// the database's clock for their state (scanView). The caller adds WHERE,
// ORDER BY and LIMIT on voucher v.
const viewSelect = `
		SELECT v.code, v.discount_amount, v.min_order_amount, v.total_limit, v.per_user_limit,
		       v.starts_at, v.ends_at, v.flash_sale, v.paused, v.used_count,
		       c.reserved, c.confirmed, c.refunded, now()
		FROM voucher v
		CROSS JOIN LATERAL (
			SELECT count(*) FILTER (WHERE r.status = 'RESERVED') AS reserved,
			       count(*) FILTER (WHERE r.status = 'CONFIRMED') AS confirmed,
			       count(*) FILTER (WHERE r.status = 'REFUNDED') AS refunded
			FROM voucher_redemption r
			WHERE r.voucher_code = v.code AND r.status IN ('RESERVED', 'CONFIRMED', 'REFUNDED')) c`

// scanView reads one row of viewSelect.
func scanView(row pgx.Row) (voucher.Voucher, error) {
	var v voucher.Voucher
	var now time.Time
	err := row.Scan(&v.Code, &v.DiscountAmount, &v.MinOrderAmount, &v.TotalLimit, &v.PerUserLimit,
		&v.StartsAt, &v.EndsAt, &v.FlashSale, &v.Paused, &v.UsedCount,
		&v.ReservedCount, &v.ConfirmedCount, &v.RefundedCount, &now)
	if err != nil {
		return voucher.Voucher{}, err
	}
	v.StartsAt, v.EndsAt = v.StartsAt.UTC(), v.EndsAt.UTC()
	v.Remaining = v.TotalLimit - v.UsedCount
	v.State = v.StateAt(now)
	return v, nil
}

// CreateVoucher inserts v and its audit row (action create, by actor).
func (s *Store) CreateVoucher(ctx context.Context, v voucher.Voucher, actor string) (voucher.Voucher, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
			INSERT INTO voucher (code, discount_amount, min_order_amount, total_limit,
			                     per_user_limit, starts_at, ends_at, flash_sale)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			v.Code, v.DiscountAmount, v.MinOrderAmount, v.TotalLimit,
			v.PerUserLimit, v.StartsAt, v.EndsAt, v.FlashSale)
		if err != nil {
			return err
		}
		if err := insertAudit(ctx, tx, v.Code, actor, ActionCreate, nil, termsOf(v)); err != nil {
			return err
		}
		return s.insertEvent(ctx, tx, events.VoucherCreated, v.Code, voucherData{Actor: actor, Terms: termsOf(v)})
	})
	if err != nil {
		return voucher.Voucher{}, translate(fmt.Errorf("create voucher %s: %w", v.Code, err))
	}
	return s.Voucher(ctx, v.Code)
}

// Voucher returns the voucher with its live counters and its state.
func (s *Store) Voucher(ctx context.Context, code string) (voucher.Voucher, error) {
	v, err := scanView(s.pool.QueryRow(ctx, viewSelect+` WHERE v.code = $1`, code))
	if err != nil {
		return voucher.Voucher{}, translate(fmt.Errorf("voucher %s: %w", code, err))
	}
	return v, nil
}

// Terms returns a voucher's terms (no counters), from memory when they were
// read less than termsTTL ago and not forgotten since.
func (s *Store) Terms(ctx context.Context, code string) (voucher.Voucher, error) {
	if c, ok := s.terms.Load(code); ok && s.now().Sub(c.(cachedTerms).at) < termsTTL {
		return c.(cachedTerms).v, nil
	}
	forgets := s.forgetsOf(code)
	seen, at := forgets.Load(), s.now()
	v, err := s.currentTerms(ctx, code)
	if err != nil {
		return voucher.Voucher{}, err
	}
	v.UsedCount, v.Remaining = 0, 0
	if forgets.Load() == seen {
		// Otherwise a change may have committed after this read: the next
		// call reads again rather than keep what may be the old terms.
		s.terms.Store(code, cachedTerms{v: v, at: at})
	}
	return v, nil
}

// termsSQL reads one voucher's terms (termsColumns) by code.
const termsSQL = `SELECT ` + termsColumns + ` FROM voucher WHERE code = $1`

// currentTerms reads a voucher's terms from the database, past the cache.
func (s *Store) currentTerms(ctx context.Context, code string) (voucher.Voucher, error) {
	v, err := scanTerms(s.pool.QueryRow(ctx, termsSQL, code))
	if err != nil {
		return voucher.Voucher{}, translate(fmt.Errorf("terms %s: %w", code, err))
	}
	return v, nil
}

// ForgetTerms drops the cached terms of code, so the next Terms reads the
// database: called after a change here and when another ledger announces one.
func (s *Store) ForgetTerms(code string) {
	s.forgetsOf(code).Add(1)
	s.terms.Delete(code)
}

// forgetsOf returns the counter of code's ForgetTerms calls.
func (s *Store) forgetsOf(code string) *atomic.Uint64 {
	if n, ok := s.forgets.Load(code); ok {
		return n.(*atomic.Uint64)
	}
	n, _ := s.forgets.LoadOrStore(code, new(atomic.Uint64))
	return n.(*atomic.Uint64)
}

// ChangeVoucher changes a voucher's terms in one transaction: it locks the
// row, lets change compute the new terms from the current ones, refuses a
// totalLimit below the uses held (LIMIT_BELOW_USED), writes the terms, moves
// each customer's limit to GREATEST(new, uses held) so that a lower
// perUserLimit keeps the uses already held and stops new ones above it, and
// writes an audit row (action, by actor). Terms that come back unchanged write
// nothing: changed is false. before and after are the terms with used_count.
func (s *Store) ChangeVoucher(ctx context.Context, code, actor, action string,
	change func(voucher.Voucher) (voucher.Voucher, error)) (before, after voucher.Voucher, changed bool, err error) {
	// A change of perUserLimit rewrites every customer's row, which must be
	// locked before the voucher's row, in the order every writer takes them
	// (reservations, customers by id, the voucher last: see groupCommit):
	// locked the other way round, it deadlocked the group commits in flight.
	// Whether the limit changes is known only from the terms, so a first
	// try that finds it changing under the voucher's lock starts over with
	// the customers' rows locked first.
	lockCustomers := false
	for {
		before, after, changed, err = s.changeVoucher(ctx, code, actor, action, lockCustomers, change)
		if !errors.Is(err, errLockCustomersFirst) {
			return before, after, changed, err
		}
		lockCustomers = true
	}
}

// errLockCustomersFirst makes changeVoucher's caller try again with the
// customers' rows locked first.
var errLockCustomersFirst = errors.New("per-user limit changes: lock the customers' rows first")

func (s *Store) changeVoucher(ctx context.Context, code, actor, action string, lockCustomers bool,
	change func(voucher.Voucher) (voucher.Voucher, error)) (before, after voucher.Voucher, changed bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if lockCustomers {
			if _, err := tx.Exec(ctx, `
				SELECT 1 FROM voucher_customer_usage WHERE voucher_code = $1
				ORDER BY customer_id FOR UPDATE`, code); err != nil {
				return err
			}
		}
		// FOR NO KEY UPDATE, as the UPDATE below takes it: the key never
		// changes, and FOR UPDATE would wait for every writer's KEY SHARE lock
		// (the foreign keys of the rows they insert) while those wait for the
		// customers' rows locked above: a deadlock.
		before, err = scanTerms(tx.QueryRow(ctx, `SELECT `+termsColumns+` FROM voucher WHERE code = $1 FOR NO KEY UPDATE`, code))
		if err != nil {
			return err
		}
		if after, err = change(before); err != nil {
			return err
		}
		if after.PerUserLimit != before.PerUserLimit && !lockCustomers {
			return errLockCustomersFirst
		}
		// Postgres keeps microseconds: compare what it will store.
		after.StartsAt, after.EndsAt = after.StartsAt.Truncate(time.Microsecond), after.EndsAt.Truncate(time.Microsecond)
		if !after.StartsAt.Before(after.EndsAt) {
			return errWindow
		}
		after.Remaining = after.TotalLimit - after.UsedCount
		if changed = termsOf(after) != termsOf(before); !changed {
			return nil
		}
		if after.TotalLimit < before.UsedCount {
			return voucher.ErrLimitBelowUsed
		}
		if _, err := tx.Exec(ctx, `
			UPDATE voucher SET discount_amount = $2, min_order_amount = $3, total_limit = $4,
			       per_user_limit = $5, starts_at = $6, ends_at = $7, paused = $8, updated_at = now()
			WHERE code = $1`,
			code, after.DiscountAmount, after.MinOrderAmount, after.TotalLimit,
			after.PerUserLimit, after.StartsAt, after.EndsAt, after.Paused); err != nil {
			return err
		}
		if after.PerUserLimit != before.PerUserLimit {
			if _, err := tx.Exec(ctx, `
				UPDATE voucher_customer_usage SET per_user_limit = GREATEST($2::int, used_count)
				WHERE voucher_code = $1`, code, after.PerUserLimit); err != nil {
				return err
			}
		}
		if err := insertAudit(ctx, tx, code, actor, action, termsOf(before), termsOf(after)); err != nil {
			return err
		}
		return s.changeEvents(ctx, tx, code, actor, action, before, after)
	})
	if errors.Is(err, errLockCustomersFirst) {
		return voucher.Voucher{}, voucher.Voucher{}, false, err
	}
	if err != nil {
		return voucher.Voucher{}, voucher.Voucher{}, false, translate(fmt.Errorf("change voucher %s: %w", code, err))
	}
	return before, after, changed, nil
}

// Now returns the database's clock: it, not any service's, decides time.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, translate(fmt.Errorf("now: %w", err))
	}
	return now, nil
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
		case pe.Code == "23514" && pe.ConstraintName == "ck_window":
			return errWindow
		case pe.Code == "23505" && pe.ConstraintName == "voucher_pkey":
			return voucher.ErrVoucherExists
		case pe.Code == "23503":
			return voucher.ErrVoucherNotFound
		case pe.Code == refusalSQLState:
			return refusal(pe)
		}
	}
	return err
}

// errWindow refuses a window that is empty once stored (Postgres keeps
// microseconds, so two instants in the same microsecond are one).
var errWindow = voucher.Errorf(voucher.CodeInvalidRequest, "startsAt must be before endsAt (to the microsecond)")

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
			var err error
			v, err = scanTerms(tx.QueryRow(ctx, termsSQL, code))
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
	return v, orders, nil
}

// LiveFlashVouchers lists the flash vouchers whose Redis state still matters:
// those that have not ended more than a day ago (Redis keys live until then).
func (s *Store) LiveFlashVouchers(ctx context.Context) ([]string, error) {
	live, err := s.LiveFlashVersions(ctx)
	if err != nil {
		return nil, err
	}
	codes := make([]string, len(live))
	for i, lv := range live {
		codes[i] = lv.Code
	}
	return codes, nil
}

// LiveVersion is a live flash voucher with its row's version: the xmin of
// the voucher row, which every change of its terms or of used_count (each
// admitted, released, expired or refunded use) replaces.
type LiveVersion struct {
	Code, Version string
}

// LiveFlashVersions is LiveFlashVouchers with each row's version.
func (s *Store) LiveFlashVersions(ctx context.Context) ([]LiveVersion, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT code, xmin::text FROM voucher
		WHERE flash_sale AND ends_at + interval '1 day' > now()
		ORDER BY code`)
	if err != nil {
		return nil, translate(fmt.Errorf("live flash vouchers: %w", err))
	}
	live, err := pgx.CollectRows(rows, pgx.RowToStructByPos[LiveVersion])
	if err != nil {
		return nil, translate(fmt.Errorf("live flash vouchers: %w", err))
	}
	return live, nil
}

// WithVoucherLock runs fn while holding a session advisory lock for code, so
// that one ledger at a time reconciles a voucher. fn runs outside any
// transaction: it talks to Redis. A caller waiting for the lock does not hold
// a pooled connection meanwhile (it polls pg_try_advisory_lock), so waiters
// can never starve the holder of the connections it needs.
//
// fn gets a context that says the lock is held: a WithVoucherLock of the same
// voucher under it (a reconcile that reloads the voucher, a warmup that runs
// under the lock) runs its fn at once instead of waiting for itself.
func (s *Store) WithVoucherLock(ctx context.Context, code string, fn func(ctx context.Context) error) error {
	if HoldsVoucherLock(ctx, code) {
		return fn(ctx)
	}
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
		return fn(context.WithValue(ctx, voucherLockKey{}, code))
	}
}

// HoldsVoucherLock reports whether ctx is one WithVoucherLock gave its fn for
// code: the lock is held.
func HoldsVoucherLock(ctx context.Context, code string) bool {
	held, _ := ctx.Value(voucherLockKey{}).(string)
	return held == code
}

// voucherLockKey marks a context under which WithVoucherLock holds a
// voucher's lock; its value is the code.
type voucherLockKey struct{}
