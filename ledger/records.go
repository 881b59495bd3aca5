package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/voucher"
)

// RecordFilter selects a page of GET /admin/vouchers/{code}/reservations.
type RecordFilter struct {
	Status     voucher.Status // "" or one of the four
	CustomerID int64          // 0: every customer
	Limit      int            // 1..maxPageSize
	After      int64          // the last row id of the previous page; 0 from the start
}

// RecordPage is one page of a voucher's reservations in creation order.
type RecordPage struct {
	Reservations []voucher.Record `json:"reservations"`
	NextCursor   *string          `json:"nextCursor"` // null on the last page
}

// withID scans reservationColumns followed by the row's id, so that the one
// mapping of a row (scanReservation) serves the listing too.
type withID struct {
	pgx.Row
	id *int64
}

func (w withID) Scan(dest ...any) error { return w.Row.Scan(append(dest, w.id)...) }

// Records returns a page of a voucher's reservations, oldest first;
// VOUCHER_NOT_FOUND when the voucher does not exist.
func (s *Store) Records(ctx context.Context, code string, f RecordFilter) (RecordPage, error) {
	page := RecordPage{Reservations: []voucher.Record{}}
	var ids []int64
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			if err := voucherExists(ctx, tx, code); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `
				SELECT `+reservationColumns+`, r.id
				FROM voucher_redemption r
				WHERE r.voucher_code = $1 AND r.id > $2
				  AND ($3 = '' OR r.status = $3) AND ($4::bigint = 0 OR r.customer_id = $4)
				ORDER BY r.id
				LIMIT $5`, code, f.After, string(f.Status), f.CustomerID, f.Limit+1)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				r, err := scanReservation(withID{Row: rows, id: &id})
				if err != nil {
					return err
				}
				page.Reservations = append(page.Reservations, r.Record())
				ids = append(ids, id)
			}
			return rows.Err()
		})
	if err != nil {
		return RecordPage{}, translate(fmt.Errorf("reservations of %s: %w", code, err))
	}
	if len(page.Reservations) > f.Limit {
		page.Reservations = page.Reservations[:f.Limit]
		next := encodeCursor(strconv.FormatInt(ids[f.Limit-1], 10))
		page.NextCursor = &next
	}
	return page, nil
}
