package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/voucher"
)

// RecordFilter selects a page of GET /admin/vouchers/{code}/reservations.
type RecordFilter struct {
	Status     voucher.Status // "" or one of the four
	CustomerID int64          // 0: every customer
	Limit      int            // at least 1
	After      int64          // the last row id of the previous page; 0 from the start
}

// withID scans reservationColumns followed by the row's id, so that the one
// mapping of a row (scanReservation) serves the listing too.
type withID struct {
	pgx.Row
	id *int64
}

func (w withID) Scan(dest ...any) error { return w.Row.Scan(append(dest, w.id)...) }

// Records returns up to f.Limit of a voucher's reservations after f.After,
// oldest first, the row id of the last one, and whether more follow;
// VOUCHER_NOT_FOUND when the voucher does not exist.
func (s *Store) Records(ctx context.Context, code string, f RecordFilter) (rs []voucher.Record, last int64, more bool, err error) {
	rs = []voucher.Record{}
	var ids []int64
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
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
				rs = append(rs, r.Record())
				ids = append(ids, id)
			}
			return rows.Err()
		})
	if err != nil {
		return nil, 0, false, translate(fmt.Errorf("reservations of %s: %w", code, err))
	}
	if len(rs) > f.Limit {
		return rs[:f.Limit], ids[f.Limit-1], true, nil
	}
	if len(ids) > 0 {
		last = ids[len(ids)-1]
	}
	return rs, last, false, nil
}

// EachRecord calls each for every reservation of a voucher, oldest first, as
// the rows arrive from Postgres: nothing is collected, so an export of any
// size holds one row at a time. VOUCHER_NOT_FOUND (before any call) when the
// voucher does not exist. The rows are read in one read-only transaction on
// the exports' own pool (OpenExports), whose deadline, on both sides, ends it
// however slowly each returns; ctx's deadline (the whole export's) ends it
// sooner.
func (s *Store) EachRecord(ctx context.Context, code string, each func(voucher.Record) error) error {
	if err := voucherExists(ctx, s.pool, code); err != nil {
		return translate(fmt.Errorf("export %s: %w", code, err))
	}
	pool := s.pool
	if s.exports != nil {
		pool = s.exports
	}
	var eachErr error
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT `+reservationColumns+` -- reservations export
			FROM voucher_redemption r WHERE r.voucher_code = $1 ORDER BY r.id`, code)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanReservation(rows)
			if err != nil {
				return err
			}
			if eachErr = each(r.Record()); eachErr != nil {
				return eachErr
			}
		}
		return rows.Err()
	})
	if eachErr != nil {
		return eachErr
	}
	if err != nil {
		return translate(fmt.Errorf("export %s: %w", code, err))
	}
	return nil
}
