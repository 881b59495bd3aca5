package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statementDeadline gives every statement the ledger sends to Postgres, and
// every wait for a pooled connection, its own deadline (DB_TIMEOUT), however
// it was called: a request, a group commit, a background job. A stopped or
// hung Postgres (SIGSTOP, a stalled disk, a lost network) keeps TCP
// connections open and never answers; without a deadline each request would
// wait for as long as it lasts. pgx uses the context these hooks return for
// the statement (a query's until its rows are closed) and for the acquire.
// On the deadline pgx closes the connection at once (its default context
// handler), so the caller gets its fault and the pool a fresh connection.
type statementDeadline struct{ timeout time.Duration }

// maxDBTimeout bounds DB_TIMEOUT: a request that waits 2 s for one statement
// has already broken the promise that a hung Postgres costs less than that.
const maxDBTimeout = 2 * time.Second

// CheckDBTimeout refuses a DB_TIMEOUT that breaks that promise.
func CheckDBTimeout(d time.Duration) error {
	if d <= 0 || d >= maxDBTimeout {
		return fmt.Errorf("DB_TIMEOUT must be above 0 and below %v (got %v)", maxDBTimeout, d)
	}
	return nil
}

// withStatementDeadlines makes cfg's pool give each statement and acquire
// timeout.
func withStatementDeadlines(cfg *pgxpool.Config, timeout time.Duration) {
	cfg.ConnConfig.Tracer = statementDeadline{timeout: timeout}
}

// withServerDeadlines makes Postgres itself end what a session of cfg's pool
// runs past timeout: statement_timeout cancels a statement (a lock wait
// included), idle_in_transaction_session_timeout ends a transaction left open.
// The client's deadline alone is not enough: when it fires, pgx closes the
// connection, but the server notices a closed socket only when it next talks
// to it, so a group commit waiting on the voucher's row lock would still
// commit once the lock came free, after its caller was told it failed and
// its use had been given back in Redis. With these, a write whose caller's
// deadline passed can still commit only within about timeout of its start
// (Settler.WaitAfterFault). The streaming export, which must run longer,
// has a pool of its own with the export's deadline (OpenExports).
func withServerDeadlines(cfg *pgxpool.Config, timeout time.Duration) {
	ms := strconv.FormatInt(max(timeout.Milliseconds(), 1), 10)
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = ms
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = ms
}

type deadlineCancelKey struct{}

// noDeadlineKey, set to a non-nil value, exempts a context's statements from
// statementDeadline; a nil value keeps them under it whatever a parent said.
type noDeadlineKey struct{}

func (t statementDeadline) start(ctx context.Context) context.Context {
	if ctx.Value(noDeadlineKey{}) != nil {
		return ctx
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	return context.WithValue(ctx, deadlineCancelKey{}, cancel)
}

func (statementDeadline) end(ctx context.Context) {
	if cancel, ok := ctx.Value(deadlineCancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

// TraceQueryStart gives the statement its deadline (pgx.QueryTracer).
func (t statementDeadline) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return t.start(ctx)
}

// TraceQueryEnd releases the statement's deadline.
func (t statementDeadline) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.end(ctx)
}

// TraceAcquireStart gives the wait for a connection its deadline
// (pgxpool.AcquireTracer).
func (t statementDeadline) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return t.start(ctx)
}

// TraceAcquireEnd releases the acquire's deadline.
func (t statementDeadline) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	t.end(ctx)
}

// PoolConfig is how the store connects to Postgres.
type PoolConfig struct {
	URL      string        // DATABASE_URL
	MaxConns int           // DB_MAX_CONNS
	MinConns int           // DB_MIN_CONNS: kept open
	Timeout  time.Duration // DB_TIMEOUT: the deadline of each statement, on both sides; 0: none
}

// Open returns the store over a pool of c: DB_MAX_CONNS, DB_MIN_CONNS
// kept open, and DB_TIMEOUT on every statement, on both sides of the
// connection. It connects on demand (Warm opens the first connections).
func Open(ctx context.Context, c PoolConfig, ttl time.Duration) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg.MaxConns = int32(c.MaxConns)
	cfg.MinConns = int32(c.MinConns)
	if c.Timeout > 0 {
		withStatementDeadlines(cfg, c.Timeout)
		withServerDeadlines(cfg, c.Timeout)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return New(pool, ttl), nil
}

// Close closes the store's connections, the exports' too.
func (s *Store) Close() {
	if s.exports != nil {
		s.exports.Close()
	}
	s.pool.Close()
}

// exportApp names the exports' sessions in pg_stat_activity.
const exportApp = "flashgate-ledger-export"

// OpenExports gives the streaming export (EachRecord) a pool of its own: at
// most c.MaxConns connections (EXPORT_MAX), none kept open, so that exports
// never take a connection that writes admissions, and a deadline of
// c.Timeout (EXPORT_TIMEOUT) on every statement, on both sides of the
// connection: the export's transaction, and so the snapshot that holds back
// vacuum on the voucher's hot row, ends by then however slowly its client
// reads. Its sessions are named flashgate-ledger-export in pg_stat_activity.
func (s *Store) OpenExports(ctx context.Context, c PoolConfig) error {
	cfg, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	cfg.MaxConns, cfg.MinConns = int32(c.MaxConns), 0
	cfg.MaxConnIdleTime = time.Minute
	cfg.ConnConfig.RuntimeParams["application_name"] = exportApp
	withStatementDeadlines(cfg, c.Timeout)
	withServerDeadlines(cfg, c.Timeout)
	if s.exports, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("connect to postgres for exports: %w", err)
	}
	return nil
}

// CheckURL reports whether url is a Postgres connection string pgx accepts,
// without connecting (the start-up check of DATABASE_URL).
func CheckURL(url string) error {
	_, err := pgx.ParseConfig(url)
	return err
}

// IsConnectError reports whether err is a failure to connect to Postgres
// (refused, unknown host, password or database refused), as opposed to an
// error of a connected session.
func IsConnectError(err error) bool {
	var connect *pgconn.ConnectError
	return errors.As(err, &connect)
}
