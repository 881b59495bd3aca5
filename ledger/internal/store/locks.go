package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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

// dispatcherLock is the advisory lock the delivering ledger holds.
const dispatcherLock = `hashtextextended('flashgate:event-dispatcher', 0)`

// DispatchLock is the event dispatcher's advisory lock, held on a connection
// of its own (not the pool's), so that the session that holds it lives as long
// as the leader: a killed process's ends at once and frees the lock.
type DispatchLock struct {
	url  string
	conn *pgx.Conn
}

// NewDispatchLock returns the lock, taken on a connection to databaseURL.
func NewDispatchLock(databaseURL string) *DispatchLock { return &DispatchLock{url: databaseURL} }

// Try tries the lock, connecting first when it has no connection (or a
// broken one).
func (l *DispatchLock) Try(ctx context.Context) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if l.conn == nil || l.conn.IsClosed() {
		c, err := pgx.Connect(cctx, l.url)
		if err != nil {
			return false, err
		}
		l.conn = c
	}
	var locked bool
	if err := l.conn.QueryRow(cctx, `SELECT pg_try_advisory_lock(`+dispatcherLock+`)`).Scan(&locked); err != nil {
		l.Close(context.WithoutCancel(ctx))
		return false, err
	}
	return locked, nil
}

// Holds checks that the lock's session is still there.
func (l *DispatchLock) Holds(ctx context.Context) error {
	if l.conn == nil {
		return errors.New("the dispatcher's lock is not held")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := l.conn.Exec(ctx, `SELECT 1`)
	return err
}

// Close ends the lock's session, which frees the lock.
func (l *DispatchLock) Close(ctx context.Context) {
	if l.conn != nil {
		l.conn.Close(ctx)
		l.conn = nil
	}
}
