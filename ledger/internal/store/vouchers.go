package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// termsColumns are the voucher columns scanTerms reads.
const termsColumns = `code, discount_amount, min_order_amount, total_limit, per_user_limit,
		       starts_at, ends_at, flash_sale, paused, used_count, require_checkout_token, hold_ttl_us,
		       write_path`

// scanTerms reads one row of termsColumns: the one mapping from a voucher row
// to a Voucher's terms (used_count included, the other counters not).
func scanTerms(row pgx.Row) (voucher.Voucher, error) {
	var v voucher.Voucher
	var hold *int64
	err := row.Scan(&v.Code, &v.DiscountAmount, &v.MinOrderAmount, &v.TotalLimit, &v.PerUserLimit,
		&v.StartsAt, &v.EndsAt, &v.FlashSale, &v.Paused, &v.UsedCount, &v.RequireCheckoutToken, &hold,
		&v.WritePath)
	if err != nil {
		return voucher.Voucher{}, err
	}
	v.StartsAt, v.EndsAt, v.HoldTTL = v.StartsAt.UTC(), v.EndsAt.UTC(), holdFrom(hold)
	v.Remaining = v.TotalLimit - v.UsedCount
	return v, nil
}

// holdFrom reads hold_ttl_us: NULL is no hold of the voucher's own.
func holdFrom(us *int64) voucher.Duration {
	if us == nil {
		return 0
	}
	return voucher.Duration(time.Duration(*us) * time.Microsecond)
}

// holdColumn is hold_ttl_us for a voucher's hold: NULL when it has none.
func holdColumn(d voucher.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	us := time.Duration(d).Microseconds()
	return &us
}

// viewSelect reads vouchers as the admin routes show them: terms, counters, and
// the database's clock for their state (scanView). The caller adds WHERE,
// ORDER BY and LIMIT on voucher v.
const viewSelect = `
		SELECT v.code, v.discount_amount, v.min_order_amount, v.total_limit, v.per_user_limit,
		       v.starts_at, v.ends_at, v.flash_sale, v.paused, v.used_count,
		       v.require_checkout_token, v.hold_ttl_us, v.write_path, c.reserved, c.confirmed, c.refunded, now()
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
	var hold *int64
	err := row.Scan(&v.Code, &v.DiscountAmount, &v.MinOrderAmount, &v.TotalLimit, &v.PerUserLimit,
		&v.StartsAt, &v.EndsAt, &v.FlashSale, &v.Paused, &v.UsedCount, &v.RequireCheckoutToken, &hold,
		&v.WritePath, &v.ReservedCount, &v.ConfirmedCount, &v.RefundedCount, &now)
	if err != nil {
		return voucher.Voucher{}, err
	}
	v.StartsAt, v.EndsAt, v.HoldTTL = v.StartsAt.UTC(), v.EndsAt.UTC(), holdFrom(hold)
	v.Remaining = v.TotalLimit - v.UsedCount
	v.State = v.StateAt(now)
	return v, nil
}

// CreateVoucher inserts v and its audit row (action create, by actor).
func (s *Store) CreateVoucher(ctx context.Context, v voucher.Voucher, actor string) (voucher.Voucher, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
			INSERT INTO voucher (code, discount_amount, min_order_amount, total_limit,
			                     per_user_limit, starts_at, ends_at, flash_sale,
			                     require_checkout_token, hold_ttl_us, write_path)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			v.Code, v.DiscountAmount, v.MinOrderAmount, v.TotalLimit,
			v.PerUserLimit, v.StartsAt, v.EndsAt, v.FlashSale, v.RequireCheckoutToken, holdColumn(v.HoldTTL),
			writePathColumn(v.WritePath))
		if err != nil {
			return err
		}
		if err := insertAudit(ctx, tx, v.Code, actor, ActionCreate, nil, TermsOf(v)); err != nil {
			return err
		}
		return s.insertEvent(ctx, tx, events.VoucherCreated, v.Code, voucherData{Actor: actor, Terms: TermsOf(v)})
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
// read less than termsTTL ago and not forgotten since. The misses of one code
// that come together share one read: when the cache runs out under a burst,
// or while Postgres is restarting (every admitted write asks), the ledger
// sends one query, or makes one connection attempt, instead of one per
// write. A caller that came after a ForgetTerms never shares a read that
// began before it: it may predate the change. The shared read is bounded by
// the pool's deadlines (DB_TIMEOUT on the wait for a connection and on the
// query), whoever started it; each caller stops waiting at its own deadline.
func (s *Store) Terms(ctx context.Context, code string) (voucher.Voucher, error) {
	if c, ok := s.terms.Load(code); ok && s.Clock().Sub(c.(cachedTerms).at) < TermsTTL {
		return c.(cachedTerms).v, nil
	}
	forgets := s.forgetsOf(code)
	seen := forgets.Load()
	read := s.termsReads.DoChan(code+"\x00"+strconv.FormatUint(seen, 10), func() (any, error) {
		at := s.Clock()
		// The read outlives the caller that started it (others wait for
		// it), and keeps the pool's deadlines whatever that caller lifted.
		rctx := context.WithValue(context.WithoutCancel(ctx), noDeadlineKey{}, nil)
		v, err := s.CurrentTerms(rctx, code)
		if err != nil {
			return voucher.Voucher{}, err
		}
		v.UsedCount, v.Remaining = 0, 0
		if forgets.Load() == seen {
			// Otherwise a change may have committed after this read: the
			// next call reads again rather than keep what may be the old
			// terms.
			s.terms.Store(code, cachedTerms{v: v, at: at})
		}
		return v, nil
	})
	select {
	case r := <-read:
		return r.Val.(voucher.Voucher), r.Err
	case <-ctx.Done():
		return voucher.Voucher{}, fmt.Errorf("terms %s: %w", code, ctx.Err())
	}
}

// termsSQL reads one voucher's terms (termsColumns) by code.
const termsSQL = `SELECT ` + termsColumns + ` FROM voucher WHERE code = $1`

// CurrentTerms reads a voucher's terms from the database, past the cache.
func (s *Store) CurrentTerms(ctx context.Context, code string) (voucher.Voucher, error) {
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
		if changed = TermsOf(after) != TermsOf(before); !changed {
			return nil
		}
		if after.TotalLimit < before.UsedCount {
			return voucher.ErrLimitBelowUsed
		}
		if after.WritePath != before.WritePath {
			if err := writePathMayChange(ctx, tx, before); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `
			UPDATE voucher SET discount_amount = $2, min_order_amount = $3, total_limit = $4,
			       per_user_limit = $5, starts_at = $6, ends_at = $7, paused = $8,
			       require_checkout_token = $9, hold_ttl_us = $10, write_path = $11, updated_at = now()
			WHERE code = $1`,
			code, after.DiscountAmount, after.MinOrderAmount, after.TotalLimit,
			after.PerUserLimit, after.StartsAt, after.EndsAt, after.Paused,
			after.RequireCheckoutToken, holdColumn(after.HoldTTL), writePathColumn(after.WritePath)); err != nil {
			return err
		}
		if after.PerUserLimit != before.PerUserLimit {
			if _, err := tx.Exec(ctx, `
				UPDATE voucher_customer_usage SET per_user_limit = GREATEST($2::int, used_count)
				WHERE voucher_code = $1`, code, after.PerUserLimit); err != nil {
				return err
			}
		}
		if err := insertAudit(ctx, tx, code, actor, action, TermsOf(before), TermsOf(after)); err != nil {
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

var errWindow = voucher.Errorf(voucher.CodeInvalidRequest, "startsAt must be before endsAt (to the microsecond)")

// writePathColumn is write_path for a voucher's path: sync when unset.
func writePathColumn(p string) string {
	if p == "" {
		return voucher.WritePathSync
	}
	return p
}

// writePathMayChange refuses a change of v's write path while v is live by
// the database's clock (WRITE_PATH_LIVE). A paused, scheduled or ended
// voucher admits nothing, so no admission can be written by the old path
// after the new one took over; the log's records still in flight are
// written by the consumer whatever the path is now (the same idempotent
// group commit), so a change never waits for them.
func writePathMayChange(ctx context.Context, tx pgx.Tx, v voucher.Voucher) error {
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return err
	}
	if v.StateAt(now) == voucher.StateLive {
		return voucher.ErrWritePathLive
	}
	return nil
}
