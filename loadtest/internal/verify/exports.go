package verify

import (
	"context"
	"fmt"
)

// SeedReservations inserts n released reservations of code straight into
// the database (customers 1..n, orders code:s.1..n): an export of them is
// larger than the sockets' buffers, so that a client that reads nothing
// stalls it.
func (b *Bench) SeedReservations(ctx context.Context, code string, n int) error {
	_, err := b.db.Exec(ctx, `
		INSERT INTO voucher_redemption (voucher_code, customer_id, order_id, status, created_at, expires_at,
		                                order_amount, discount_amount, released_at, release_reason)
		SELECT $1::text, i, $1::text || ':s.' || i, 'RELEASED', now(), now() + interval '15 minutes',
		       1000 + i, 1000, now(), 'CANCELLED'
		FROM generate_series(1, $2::int) i`, code, n)
	if err != nil {
		return fmt.Errorf("seed %d reservations of %s: %w", n, code, err)
	}
	return nil
}

// ExportSessions counts the sessions whose last statement is the ledger's
// export query (marked "-- reservations export") and that are still inside
// its transaction, holding a snapshot: what holds back vacuum on the
// vouchers' rows.
func (b *Bench) ExportSessions(ctx context.Context) (int, error) {
	var n int
	err := b.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE query LIKE '%-- reservations export%' AND xact_start IS NOT NULL AND pid <> pg_backend_pid()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count export sessions: %w", err)
	}
	return n, nil
}
