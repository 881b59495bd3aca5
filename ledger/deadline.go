package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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

// checkDBTimeout refuses a DB_TIMEOUT that breaks that promise.
func checkDBTimeout(d time.Duration) error {
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

type deadlineCancelKey struct{}
type noDeadlineKey struct{}

// withoutStatementDeadline marks ctx's statements as exempt: a streaming
// export reads for as long as its client does.
func withoutStatementDeadline(ctx context.Context) context.Context {
	return context.WithValue(ctx, noDeadlineKey{}, true)
}

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
