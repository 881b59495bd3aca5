package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/voucher"
)

// ActiveOrder is a reservation that holds a use (RESERVED or CONFIRMED).
type ActiveOrder struct {
	OrderID    string
	CustomerID int64
	CreatedAt  time.Time
	// ConfirmedAt is when it was confirmed (zero: RESERVED): a late payment
	// confirms a released reservation and takes its use again, in the
	// database first and in Redis just after.
	ConfirmedAt time.Time
}

// activeOrderColumns are the voucher_redemption columns collectActiveOrders reads.
const activeOrderColumns = `order_id, customer_id, created_at, confirmed_at`

// collectActiveOrders reads rows of activeOrderColumns.
func collectActiveOrders(rows pgx.Rows) ([]ActiveOrder, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ActiveOrder, error) {
		var o ActiveOrder
		var confirmed *time.Time
		err := row.Scan(&o.OrderID, &o.CustomerID, &o.CreatedAt, &confirmed)
		if confirmed != nil {
			o.ConfirmedAt = *confirmed
		}
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

// ChangedWithin reports whether voucher code's terms were changed (its row's
// updated_at, which every change of terms sets) less than d ago, by the
// database's clock.
func (s *Store) ChangedWithin(ctx context.Context, code string, d time.Duration) (bool, error) {
	var recent bool
	err := s.pool.QueryRow(ctx, `SELECT updated_at > now() - make_interval(secs => $2) FROM voucher WHERE code = $1`,
		code, d.Seconds()).Scan(&recent)
	if err != nil {
		return false, translate(fmt.Errorf("changed within %s: %w", code, err))
	}
	return recent, nil
}
