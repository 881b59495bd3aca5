package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/voucher"
)

// FailedAdmission is an admission of a log voucher the database refused (a
// dead letter), as GET /admin/admissions/failed lists it.
type FailedAdmission struct {
	Code        string     `json:"code"`
	OrderID     string     `json:"orderId"`
	CustomerID  int64      `json:"customerId"`
	OrderAmount int64      `json:"orderAmount"`
	Reason      string     `json:"reason"` // the refusal's error code, or UNREADABLE
	Message     string     `json:"message"`
	Partition   int32      `json:"partition"`
	Offset      int64      `json:"offset"`
	AdmittedAt  time.Time  `json:"admittedAt"`
	FailedAt    time.Time  `json:"failedAt"`
	Resolution  *string    `json:"resolution"` // null while open; replayed or discarded
	ResolvedAt  *time.Time `json:"resolvedAt"`
	ResolvedBy  *string    `json:"resolvedBy"`
	Failures    int        `json:"failures"` // times the order's admissions were refused (a replay refused again: 2)
}

// The resolutions of a failed admission.
const (
	ResolutionReplayed  = "replayed"
	ResolutionDiscarded = "discarded"
)

// InsertFailedAdmissions records refused admissions. One already recorded
// from the same record (a redelivery) is kept as it was; one recorded from
// another record of the order (a replay, refused again) is reopened with
// the new failure, its failures counted: a dead letter never disappears
// behind an earlier resolution.
func (s *Store) InsertFailedAdmissions(ctx context.Context, fs []FailedAdmission) error {
	if len(fs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, f := range fs {
		b.Queue(`
			INSERT INTO admission_failed (voucher_code, order_id, customer_id, order_amount, reason, message,
			                              log_partition, log_offset, admitted_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (voucher_code, order_id) DO UPDATE SET
				customer_id = EXCLUDED.customer_id, order_amount = EXCLUDED.order_amount,
				reason = EXCLUDED.reason, message = EXCLUDED.message,
				log_partition = EXCLUDED.log_partition, log_offset = EXCLUDED.log_offset,
				admitted_at = EXCLUDED.admitted_at, failed_at = now(),
				resolution = NULL, resolved_at = NULL, resolved_by = NULL,
				failures = admission_failed.failures + 1
			WHERE (admission_failed.log_partition, admission_failed.log_offset)
			      IS DISTINCT FROM (EXCLUDED.log_partition, EXCLUDED.log_offset)`,
			f.Code, f.OrderID, f.CustomerID, f.OrderAmount, f.Reason, f.Message, f.Partition, f.Offset, f.AdmittedAt)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return translate(fmt.Errorf("record %d failed admissions: %w", len(fs), err))
	}
	return nil
}

const failedColumns = `voucher_code, order_id, customer_id, order_amount, reason, message, log_partition, log_offset,
	admitted_at, failed_at, resolution, resolved_at, resolved_by, failures`

func scanFailed(row pgx.CollectableRow) (FailedAdmission, error) {
	var f FailedAdmission
	err := row.Scan(&f.Code, &f.OrderID, &f.CustomerID, &f.OrderAmount, &f.Reason, &f.Message, &f.Partition, &f.Offset,
		&f.AdmittedAt, &f.FailedAt, &f.Resolution, &f.ResolvedAt, &f.ResolvedBy, &f.Failures)
	return f, err
}

// FailedAdmissions lists the refused admissions, oldest first: only those
// still open unless all, at most limit.
func (s *Store) FailedAdmissions(ctx context.Context, all bool, limit int) ([]FailedAdmission, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+failedColumns+` FROM admission_failed
		WHERE $1 OR resolution IS NULL ORDER BY failed_at, voucher_code, order_id LIMIT $2`, all, limit)
	if err != nil {
		return nil, translate(fmt.Errorf("failed admissions: %w", err))
	}
	fs, err := pgx.CollectRows(rows, scanFailed)
	if err != nil {
		return nil, translate(fmt.Errorf("failed admissions: %w", err))
	}
	return fs, nil
}

// FailedAdmission returns one refused admission (RESERVATION_NOT_FOUND when
// there is none).
func (s *Store) FailedAdmission(ctx context.Context, code, orderID string) (FailedAdmission, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+failedColumns+` FROM admission_failed
		WHERE voucher_code = $1 AND order_id = $2`, code, orderID)
	if err != nil {
		return FailedAdmission{}, translate(fmt.Errorf("failed admission %s/%s: %w", code, orderID, err))
	}
	f, err := pgx.CollectExactlyOneRow(rows, scanFailed)
	if errors.Is(err, pgx.ErrNoRows) {
		return FailedAdmission{}, voucher.Errorf(voucher.CodeNotFound, "no failed admission of order %s for voucher %s", orderID, code)
	}
	if err != nil {
		return FailedAdmission{}, translate(fmt.Errorf("failed admission %s/%s: %w", code, orderID, err))
	}
	return f, nil
}

// ResolveFailedAdmission marks the refused admission f, as it was read,
// replayed or discarded by actor. Only that failure is resolved: one already
// resolved, or refused again since it was read (its replay's record, say,
// refused while the replay was answered: a new partition and offset), is left
// as it is (false), so a failure nobody saw is never closed.
func (s *Store) ResolveFailedAdmission(ctx context.Context, f FailedAdmission, resolution, actor string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE admission_failed SET resolution = $3, resolved_at = now(), resolved_by = $4
		WHERE voucher_code = $1 AND order_id = $2 AND resolution IS NULL
		  AND log_partition = $5 AND log_offset = $6`, f.Code, f.OrderID, resolution, actor, f.Partition, f.Offset)
	if err != nil {
		return false, translate(fmt.Errorf("resolve failed admission %s/%s: %w", f.Code, f.OrderID, err))
	}
	return tag.RowsAffected() == 1, nil
}
