// Package store is the ledger's Postgres: every SQL statement the ledger
// sends lives here, one file per noun (vouchers, reservations, redemptions,
// the group commit, the outbox, the audit trail, the listings), with the
// driver's errors translated to voucher errors at its edge, the pool's
// per-statement deadlines, the advisory locks and the connections' warm-up.
// Nothing above it imports the driver.
package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Store is the ledger's Postgres side: the money truth, and the only code that
// speaks SQL. Every state change is a conditional UPDATE (or an INSERT guarded
// by a constraint), so a request that races another one either wins or changes
// nothing. This file holds the vouchers; reservations.go writes reservations
// and redemptions.go moves them through their states.
type Store struct {
	pool *pgxpool.Pool
	// exports is the streaming export's own small pool (OpenExports); nil:
	// exports read through pool, under its deadlines.
	exports *pgxpool.Pool
	ttl     time.Duration
	Clock   func() time.Time // ages the terms cache
	events  bool             // write the outbox's events (EVENTS=off: only to measure what they cost)

	// terms caches each voucher's terms for at most termsTTL: an admin change
	// reaches every ledger within that, and at once the one that made it (and
	// those that hear of it: ForgetTerms). Counters are always read from the
	// database.
	terms   sync.Map // code -> cachedTerms
	forgets sync.Map // code -> *atomic.Uint64, its ForgetTerms calls: a read that overlapped one is not cached
	// termsReads shares one database read among the concurrent misses of
	// one code (see Terms).
	termsReads singleflight.Group
}

// TermsTTL is how long Terms keeps a voucher's terms.
const TermsTTL = time.Second

type cachedTerms struct {
	v  voucher.Voucher
	at time.Time
}

// New returns a Store on pool whose reservations live for ttl.
func New(pool *pgxpool.Pool, ttl time.Duration) *Store {
	return &Store{pool: pool, ttl: ttl, Clock: time.Now, events: true}
}

// WriteEvents turns the outbox's events on (the default) or off. Off is for
// measuring their cost only: nothing is then told of the changes.
func (s *Store) WriteEvents(on bool) { s.events = on }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

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
