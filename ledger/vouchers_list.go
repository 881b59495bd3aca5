package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Page sizes of the admin listings.
const (
	defaultPageSize = 100
	maxPageSize     = 500
)

// VoucherFilter selects a page of GET /admin/vouchers.
type VoucherFilter struct {
	State     string // "" or a voucher.State*
	FlashSale *bool  // nil: both kinds
	Limit     int    // 1..maxPageSize
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

// A cursor is opaque to clients: base64url (no padding) of the last item's
// key, a voucher code or a reservation id.

func encodeCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

func decodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 {
		return "", voucher.Errorf(voucher.CodeInvalidRequest, "cursor must be a nextCursor this route answered")
	}
	return string(b), nil
}

// decodeCodeCursor decodes a cursor of GET /admin/vouchers: a voucher code.
func decodeCodeCursor(c string) (string, error) {
	code, err := decodeCursor(c)
	if err == nil && !voucher.ValidCode(code) {
		err = voucher.Errorf(voucher.CodeInvalidRequest, "cursor must be a nextCursor this route answered")
	}
	return code, err
}

// decodeIDCursor decodes a cursor of a reservations listing: a row id.
func decodeIDCursor(c string) (int64, error) {
	s, err := decodeCursor(c)
	if err != nil {
		return 0, err
	}
	id, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
		return 0, voucher.Errorf(voucher.CodeInvalidRequest, "cursor must be a nextCursor this route answered")
	}
	return id, nil
}
