package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The outbox (voucher_event) holds every state change as an event, written in
// the transaction of the change: takeVoucherUses and the group commit
// (groupCommitSQL: reserved, sold out), Confirm
// and ExpireBatch write theirs inside their own statements, the others call
// insertEvent. An event that changes a voucher's counters is written after the
// voucher's row is locked, so a voucher's events are numbered in the order its
// changes commit.
//
// Ids come from a sequence, so a transaction that took id 10 may commit after
// one that took id 11. The dispatcher therefore reads only up to a watermark:
// an id below which no transaction can still commit an event (see
// Store.AdvanceWatermark). Below it the table no longer changes except by
// pruning, so one cursor per sink is exact.

// watermarkCursor names event_cursor's row of the watermark.
const watermarkCursor = "watermark"

// The data of the events written from Go (the SQL ones build the same fields).
type (
	confirmedData struct {
		OrderID        string `json:"orderId"`
		CustomerID     int64  `json:"customerId"`
		OrderAmount    *int64 `json:"orderAmount"`
		DiscountAmount int64  `json:"discountAmount"`
		Late           bool   `json:"late"`              // confirmed after its hold ran out
		TookUse        bool   `json:"tookUse,omitempty"` // late, after the sweeper had released it: a use was taken anew
	}
	endedData struct {
		OrderID        string `json:"orderId"`
		CustomerID     int64  `json:"customerId"`
		DiscountAmount int64  `json:"discountAmount"`
		Reason         string `json:"reason"` // CANCELLED, EXPIRED or REFUNDED
	}
	voucherData struct {
		Actor  string         `json:"actor"`
		Before *voucher.Terms `json:"before,omitempty"` // voucher.updated only
		Terms  voucher.Terms  `json:"terms"`
	}
	soldOutData struct {
		TotalLimit int `json:"totalLimit"`
		UsedCount  int `json:"usedCount"`
	}
)

// insertEvent writes one event of voucher code in tx (nothing when the outbox is off).
func (s *Store) insertEvent(ctx context.Context, tx pgx.Tx, typ, code string, data any) error {
	if !s.events {
		return nil
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("event %s: %w", typ, err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO voucher_event (type, voucher_code, data) VALUES ($1, $2, $3)`, typ, code, b)
	return err
}

// changeEvents writes the events of an admin change of terms (action), and
// voucher.sold_out when a lower totalLimit leaves no use.
func (s *Store) changeEvents(ctx context.Context, tx pgx.Tx, code, actor, action string, before, after voucher.Voucher) error {
	data := voucherData{Actor: actor, Terms: TermsOf(after)}
	typ := events.VoucherUpdated
	switch action {
	case ActionPause:
		typ = events.VoucherPaused
	case ActionResume:
		typ = events.VoucherResumed
	default:
		b := TermsOf(before)
		data.Before = &b
	}
	if err := s.insertEvent(ctx, tx, typ, code, data); err != nil {
		return err
	}
	if after.TotalLimit == before.UsedCount && before.TotalLimit != before.UsedCount {
		return s.insertEvent(ctx, tx, events.VoucherSoldOut, code, soldOutData{TotalLimit: after.TotalLimit, UsedCount: before.UsedCount})
	}
	return nil
}

// Events returns up to limit events with after < id <= upTo, in id order.
func (s *Store) Events(ctx context.Context, after, upTo int64, limit int) ([]events.Event, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, type, occurred_at, voucher_code, data FROM voucher_event
		WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3`, after, upTo, limit)
	if err != nil {
		return nil, translate(fmt.Errorf("events after %d: %w", after, err))
	}
	out, err := pgx.CollectRows(rows, ScanEvent)
	if err != nil {
		return nil, translate(fmt.Errorf("events after %d: %w", after, err))
	}
	return out, nil
}

func ScanEvent(row pgx.CollectableRow) (events.Event, error) {
	var e events.Event
	err := row.Scan(&e.ID, &e.Type, &e.OccurredAt, &e.VoucherCode, &e.Data)
	e.OccurredAt = e.OccurredAt.UTC()
	return e, err
}

// Cursor returns the position of event_cursor's row name (0 when it has none).
func (s *Store) Cursor(ctx context.Context, name string) (int64, error) {
	var pos int64
	err := s.pool.QueryRow(ctx, `SELECT position FROM event_cursor WHERE name = $1`, name).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, translate(fmt.Errorf("event cursor %s: %w", name, err))
	}
	return pos, nil
}

// Watermark returns the highest id below which every event is final.
func (s *Store) Watermark(ctx context.Context) (int64, error) { return s.Cursor(ctx, watermarkCursor) }

// AdvanceWatermark moves the watermark as far as it may and returns it. It
// reads the last id the sequence handed out, then takes a new xid of its own
// (xids are handed out in increasing order, and every transaction that took
// one of those ids had its xid before: an id is taken only once its
// transaction has an xid), and waits, up to wait, until no transaction below
// that xid is running: then no id up to the one read can still appear. Not
// the snapshot's xmax: that is the latest completed xid + 1, and a running
// transaction above it would pass unseen. One xid per move, none while idle.
// prev is the watermark as the caller knows it: with no id handed out since,
// it is the answer, and nothing is written; when the wait runs out, it is
// returned with errWatermarkHeld.
func (s *Store) AdvanceWatermark(ctx context.Context, prev int64, wait time.Duration) (int64, error) {
	var last int64
	var called bool
	if err := s.pool.QueryRow(ctx, `SELECT last_value, is_called FROM voucher_event_id_seq`).Scan(&last, &called); err != nil {
		return 0, translate(fmt.Errorf("event sequence: %w", err))
	}
	if !called || last <= prev {
		return prev, nil
	}
	var xid string
	if err := s.pool.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		return 0, translate(fmt.Errorf("event snapshot: %w", err))
	}
	deadline := time.Now().Add(wait)
	for {
		var done bool
		err := s.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::text::xid8`, xid).Scan(&done)
		if err != nil {
			return 0, translate(fmt.Errorf("event snapshot: %w", err))
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			return prev, ErrWatermarkHeld
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := s.setCursor(ctx, watermarkCursor, last); err != nil {
		return 0, err
	}
	return last, nil
}

// ErrWatermarkHeld reports a watermark that could not move within its wait:
// a transaction that began before the events it waits for is still open.
var ErrWatermarkHeld = errors.New("event watermark held back by an open transaction (pg_stat_activity: idle in transaction?)")

// setCursor moves event_cursor's row name forward to pos (never back).
func (s *Store) setCursor(ctx context.Context, name string, pos int64) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO event_cursor (name, position) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET position = GREATEST(event_cursor.position, EXCLUDED.position), updated_at = now()`,
		name, pos)
	if err != nil {
		return translate(fmt.Errorf("event cursor %s: %w", name, err))
	}
	return nil
}

// Parked is an event a sink gave up on, as the admin routes show it.
type Parked struct {
	events.Event
	Sink      string    `json:"sink"`
	Status    string    `json:"status"` // FAILED, or RETRY once asked to send again
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError"`
	FailedAt  time.Time `json:"failedAt"`
}

// Park records, with the cursor of sink moved to pos, the events it gave up on
// (FAILED), in one transaction: a retried event that fails again stays parked
// with its new count of attempts.
func (s *Store) Park(ctx context.Context, sink string, pos int64, failed []Parked) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, f := range failed {
			if _, err := tx.Exec(ctx, `
				INSERT INTO event_failure (sink, event_id, status, attempts, last_error)
				VALUES ($1, $2, 'FAILED', $3, $4)
				ON CONFLICT (sink, event_id) DO UPDATE SET status = 'FAILED',
				    attempts = event_failure.attempts + EXCLUDED.attempts, last_error = EXCLUDED.last_error, failed_at = now()`,
				sink, f.ID, f.Attempts, f.LastError); err != nil {
				return err
			}
		}
		if pos == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO event_cursor (name, position) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET position = GREATEST(event_cursor.position, EXCLUDED.position), updated_at = now()`,
			sink, pos)
		return err
	})
	if err != nil {
		return translate(fmt.Errorf("park events of %s: %w", sink, err))
	}
	return nil
}

// parkedSelect reads event_failure f joined with its event e (scanParked).
const parkedSelect = `
	SELECT e.id, e.type, e.occurred_at, e.voucher_code, e.data, f.sink, f.status, f.attempts, f.last_error, f.failed_at
	FROM event_failure f JOIN voucher_event e ON e.id = f.event_id`

func scanParked(row pgx.CollectableRow) (Parked, error) {
	var p Parked
	err := row.Scan(&p.ID, &p.Type, &p.OccurredAt, &p.VoucherCode, &p.Data, &p.Sink, &p.Status, &p.Attempts, &p.LastError, &p.FailedAt)
	p.OccurredAt, p.FailedAt = p.OccurredAt.UTC(), p.FailedAt.UTC()
	return p, err
}

// ParkedEvents returns up to limit parked events (of every sink, or of one)
// with event id above after, in id order; status "" means every status.
func (s *Store) ParkedEvents(ctx context.Context, sink, status string, after int64, limit int) ([]Parked, error) {
	rows, err := s.pool.Query(ctx, parkedSelect+`
		WHERE ($1 = '' OR f.sink = $1) AND ($2 = '' OR f.status = $2) AND f.event_id > $3
		ORDER BY f.event_id, f.sink LIMIT $4`, sink, status, after, limit)
	if err != nil {
		return nil, translate(fmt.Errorf("parked events: %w", err))
	}
	out, err := pgx.CollectRows(rows, scanParked)
	if err != nil {
		return nil, translate(fmt.Errorf("parked events: %w", err))
	}
	return out, nil
}

// errNoParkedEvent answers a retry of an event no sink has parked.
var errNoParkedEvent = voucher.Errorf(voucher.CodeNotFound, "no sink has this event parked as failed")

// RetryEvent asks every sink that parked event id to send it again and returns
// the failures it marked (already marked ones count: a retry is idempotent).
func (s *Store) RetryEvent(ctx context.Context, id int64) ([]Parked, error) {
	// One statement: the dispatcher may deliver and delete a failure as soon
	// as it is marked, so it is answered from what the UPDATE returned.
	rows, err := s.pool.Query(ctx, `
		WITH f AS (UPDATE event_failure SET status = 'RETRY' WHERE event_id = $1 RETURNING *)
		SELECT e.id, e.type, e.occurred_at, e.voucher_code, e.data, f.sink, f.status, f.attempts, f.last_error, f.failed_at
		FROM f JOIN voucher_event e ON e.id = f.event_id ORDER BY f.sink`, id)
	if err != nil {
		return nil, translate(fmt.Errorf("retry event %d: %w", id, err))
	}
	out, err := pgx.CollectRows(rows, scanParked)
	if err != nil {
		return nil, translate(fmt.Errorf("retry event %d: %w", id, err))
	}
	if len(out) == 0 {
		return nil, errNoParkedEvent
	}
	return out, nil
}

// Delivered removes sink's failure of event id once a retry went through.
func (s *Store) Delivered(ctx context.Context, sink string, id int64) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM event_failure WHERE sink = $1 AND event_id = $2`, sink, id); err != nil {
		return translate(fmt.Errorf("delivered %d to %s: %w", id, sink, err))
	}
	return nil
}

// PruneEvents deletes the events up to id upTo (what every sink and the
// watermark have passed) that happened before before and that no sink holds
// parked, at most limit at a time; it returns how many it deleted.
func (s *Store) PruneEvents(ctx context.Context, upTo int64, before time.Time, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM voucher_event WHERE id IN (
			SELECT e.id FROM voucher_event e
			WHERE e.id <= $1 AND e.occurred_at < $2
			  AND NOT EXISTS (SELECT 1 FROM event_failure f WHERE f.event_id = e.id)
			ORDER BY e.id LIMIT $3)`, upTo, before, limit)
	if err != nil {
		return 0, translate(fmt.Errorf("prune events: %w", err))
	}
	return tag.RowsAffected(), nil
}

// UndeliveredSince returns when the oldest event past pos (up to any id)
// happened, and false when there is none: what a sink's lag is measured from.
func (s *Store) UndeliveredSince(ctx context.Context, pos int64) (time.Time, bool, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT occurred_at FROM voucher_event WHERE id > $1 ORDER BY id LIMIT 1`, pos).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, translate(fmt.Errorf("undelivered events: %w", err))
	}
	return at, true, nil
}

// CountEvents counts the events with ids in (after, upTo].
func (s *Store) CountEvents(ctx context.Context, after, upTo int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM voucher_event WHERE id > $1 AND id <= $2`, after, upTo).Scan(&n)
	return n, err
}
