package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/voucher"
)

// VoucherFilter selects a page of GET /admin/vouchers.
type VoucherFilter struct {
	State     string // "" or a voucher.State*
	FlashSale *bool  // nil: both kinds
	Limit     int    // at least 1
	After     string // the last code of the previous page; "" from the start
}

// stateSQL is voucher.StateAt in SQL, by the database's clock, for the state
// filter: ended from ends_at on, else paused, else scheduled before starts_at,
// else live. TestListVouchersByState checks the two agree.
const stateSQL = `CASE WHEN now() >= v.ends_at THEN 'ended'
		       WHEN v.paused THEN 'paused'
		       WHEN now() < v.starts_at THEN 'scheduled'
		       ELSE 'live' END`

// ListVouchers returns up to f.Limit vouchers after f.After in code order, as
// the view shows them, and whether more follow.
func (s *Store) ListVouchers(ctx context.Context, f VoucherFilter) (vs []voucher.Voucher, more bool, err error) {
	rows, err := s.pool.Query(ctx, viewSelect+`
		WHERE ($1 = '' OR `+stateSQL+` = $1)
		  AND ($2::boolean IS NULL OR v.flash_sale = $2)
		  AND v.code > $3
		ORDER BY v.code
		LIMIT $4`, f.State, f.FlashSale, f.After, f.Limit+1)
	if err != nil {
		return nil, false, translate(fmt.Errorf("list vouchers: %w", err))
	}
	vs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (voucher.Voucher, error) { return scanView(row) })
	if err != nil {
		return nil, false, translate(fmt.Errorf("list vouchers: %w", err))
	}
	if len(vs) > f.Limit {
		return vs[:f.Limit], true, nil
	}
	if vs == nil {
		vs = []voucher.Voucher{}
	}
	return vs, false, nil
}

// VoucherCodes returns up to limit voucher codes after after (from the start
// when empty), in code order, and whether more follow: every voucher, since
// none is ever deleted. An index-only scan of the primary key.
func (s *Store) VoucherCodes(ctx context.Context, after string, limit int) (codes []string, more bool, err error) {
	rows, err := s.pool.Query(ctx, `SELECT code FROM voucher WHERE code > $1 ORDER BY code LIMIT $2`, after, limit+1)
	if err != nil {
		return nil, false, translate(fmt.Errorf("list voucher codes: %w", err))
	}
	codes, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false, translate(fmt.Errorf("list voucher codes: %w", err))
	}
	if len(codes) > limit {
		return codes[:limit], true, nil
	}
	if codes == nil {
		codes = []string{}
	}
	return codes, false, nil
}
