package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flashgate/flashgate/shared/voucher"
)

// The actions of the audit trail (voucher_audit.action).
const (
	ActionCreate    = "create"
	ActionUpdate    = "update"
	ActionPause     = "pause"
	ActionResume    = "resume"
	ActionWarmup    = "warmup"
	ActionReconcile = "reconcile" // only a reconcile that repaired (repairKinds) or reloaded something
)

// ReconcilerActor is the actor of the periodic reconciler's audit rows.
const ReconcilerActor = "reconciler"

// AuditEvent is one row of a voucher's audit trail.
type AuditEvent struct {
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Before json.RawMessage `json:"before"` // null when there was nothing before (create)
	After  json.RawMessage `json:"after"`
}

// TermsOf returns v's terms as an audit row and a voucher event keep them:
// times in UTC and writePath only for a log voucher (sync, the default, is
// left out), so that two vouchers with the same terms compare equal.
func TermsOf(v voucher.Voucher) voucher.Terms {
	t := v.Terms
	t.StartsAt, t.EndsAt, t.WritePath = t.StartsAt.UTC(), t.EndsAt.UTC(), auditPath(t.WritePath)
	return t
}

// execer is what both a pool and a transaction offer for writes.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insertAudit writes one audit row; before and after are stored as JSON (nil: null).
func insertAudit(ctx context.Context, q execer, code, actor, action string, before, after any) error {
	b, err := auditJSON(before)
	if err != nil {
		return err
	}
	a, err := auditJSON(after)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `
		INSERT INTO voucher_audit (voucher_code, actor, action, before, after)
		VALUES ($1, $2, $3, $4, $5)`, code, actor, action, b, a)
	return err
}

func auditJSON(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return b, nil
}

// AddAudit writes one audit row outside a change of terms (warmup, reconcile).
func (s *Store) AddAudit(ctx context.Context, code, actor, action string, before, after any) error {
	if err := insertAudit(ctx, s.pool, code, actor, action, before, after); err != nil {
		return translate(fmt.Errorf("audit %s %s: %w", action, code, err))
	}
	return nil
}

// Audit returns a voucher's audit trail, oldest first.
func (s *Store) Audit(ctx context.Context, code string) ([]AuditEvent, error) {
	var events []AuditEvent
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			if err := voucherExists(ctx, tx, code); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `
				SELECT at, actor, action, before, after FROM voucher_audit
				WHERE voucher_code = $1 ORDER BY id`, code)
			if err != nil {
				return err
			}
			events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEvent, error) {
				var e AuditEvent
				var before, after []byte
				err := row.Scan(&e.At, &e.Actor, &e.Action, &before, &after)
				e.At, e.Before, e.After = e.At.UTC(), jsonOrNull(before), jsonOrNull(after)
				return e, err
			})
			return err
		})
	if err != nil {
		return nil, translate(fmt.Errorf("audit %s: %w", code, err))
	}
	if events == nil {
		events = []AuditEvent{}
	}
	return events, nil
}

func jsonOrNull(b []byte) json.RawMessage {
	if b == nil {
		return json.RawMessage("null")
	}
	return b
}

// voucherExists answers VOUCHER_NOT_FOUND when code names no voucher: the
// listings of a voucher's rows tell an unknown voucher from an empty list.
func voucherExists(ctx context.Context, q querier, code string) error {
	var one int
	return q.QueryRow(ctx, `SELECT 1 FROM voucher WHERE code = $1`, code).Scan(&one)
}

// auditPath is a write path as an audit row and an event's terms keep it:
// absent for sync, so the terms of every voucher before write paths existed
// read as they did.
func auditPath(p string) string {
	if p == voucher.WritePathLog {
		return p
	}
	return ""
}
