package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/flashgate/flashgate/shared/agreement"
)

// voprLogHoldSlack is how far a row's expires_at may lie outside the hold
// its 201 promised: the test's clock and the services' are one machine's,
// and a hold counted from the record's consumption instead of its admission
// is off by the record's wait in the log (seconds in these rounds).
const voprLogHoldSlack = time.Second

// admittedBefore is a log round's heldBefore: a row's use was held by at if
// the row was created by then or, since a row follows its 201 by the
// record's wait in the log, a 201 of its order was asked for by then.
func (run *voprLogRun) admittedBefore(row voprRow, at time.Time) bool {
	if !row.created.After(at) {
		return true
	}
	for _, op := range run.h.all() {
		if op.order == row.order && op.code == row.code && strings.HasPrefix(op.kind, "reserve") &&
			op.answer.status == http.StatusCreated && !run.h.start.Add(op.start).After(at) {
			return true
		}
	}
	return false
}

// logChecks are the log round's checks beyond TestVOPR's: every 201 has its
// row with the terms it promised (checkTerms), and nothing was dead-lettered.
func (run *voprLogRun) logChecks(ctx context.Context, db *voprDB) []voprProblem {
	problems := run.checkTerms(ctx, db)
	return append(problems, run.checkDeadLetters()...)
}

// voprTerms are a row's terms that its 201 promised.
type voprTerms struct {
	discount int64
	expires  time.Time
}

// checkTerms: every 201 of an order whose row is on the 201's voucher
// promised the row's discount (two 201s of one order with different
// discounts break one promise whatever the row says), and the row's
// expires_at lies within the hold its admission promised, give or take
// voprLogHoldSlack. A 201's body says no expiry: the hold is the voucher's
// holdTtl when the order was admitted, counted from then, whatever the terms
// when the record is written. The admission came between the order's first
// reserve that may have admitted it (answered 201, 5xx or nothing: a retry's
// 201 replays an admission its client never heard of) and its first 201's
// answer: expires_at lies between the first plus the shortest holdTtl the
// voucher had by that answer and the answer plus the longest. The row's
// voucher and customer are checkAnswers'.
func (run *voprLogRun) checkTerms(ctx context.Context, db *voprDB) []voprProblem {
	terms, err := run.readTerms(ctx)
	if err != nil {
		return []voprProblem{{check: "read", msg: err.Error()}}
	}
	var problems []voprProblem
	seen := map[string]bool{}
	add := func(check, order, msg string) {
		if !seen[check+order] {
			seen[check+order] = true
			problems = append(problems, voprProblem{check: check, msg: msg, orders: []string{order}})
		}
	}
	ops := run.h.all()
	first, tried := map[string]voprOp{}, map[string]voprOp{} // the first 201, the first reserve that may have admitted
	for _, op := range ops {
		row, ok := db.rows[op.order]
		a := op.answer
		if !strings.HasPrefix(op.kind, "reserve") || !ok || row.code != op.code {
			continue
		}
		if a.status == 0 || a.status == http.StatusCreated || a.status >= 500 {
			if f, ok := tried[op.order]; !ok || op.start < f.start {
				tried[op.order] = op
			}
		}
		if a.status != http.StatusCreated {
			continue
		}
		if t := terms[op.order]; a.discount != t.discount {
			add("201 terms: discount", op.order, fmt.Sprintf("#%d %s answered 201 with discount %d; its row has %d",
				op.id, op.order, a.discount, t.discount))
		}
		if f, ok := first[op.order]; !ok || op.start < f.start {
			first[op.order] = op
		}
	}
	for id, op := range first {
		lo, hi := voprHoldRange(ops, op.code, op.end)
		from, to := run.h.start.Add(tried[id].start+lo-voprLogHoldSlack), run.h.start.Add(op.end+hi+voprLogHoldSlack)
		if e := terms[id].expires; e.Before(from) || e.After(to) {
			add("201 terms: hold", id, fmt.Sprintf("#%d %s answered 201 at %s..%s (first sent at %s) with a hold of %v..%v; its row expires %s (%v after the answer)",
				op.id, id, voprClock(run.h.start.Add(op.start)), voprClock(run.h.start.Add(op.end)), voprClock(run.h.start.Add(tried[id].start)),
				lo, hi, voprClock(e), e.Sub(run.h.start.Add(op.end)).Round(time.Millisecond)))
		}
	}
	return problems
}

func voprClock(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// readTerms reads the round's rows' discount and expiry, by orderId.
func (run *voprLogRun) readTerms(ctx context.Context) (map[string]voprTerms, error) {
	terms := map[string]voprTerms{}
	rows, err := run.s.pool.Query(ctx, `SELECT order_id, discount_amount, expires_at
		FROM voucher_redemption WHERE voucher_code = ANY($1)`, run.codes())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var t voprTerms
		if err := rows.Scan(&id, &t.discount, &t.expires); err != nil {
			return nil, err
		}
		terms[id] = t
	}
	return terms, rows.Err()
}

// voprHoldRange is the shortest and the longest holdTtl voucher code had by
// before: its first, and every PATCH of it sent by then and not refused.
func voprHoldRange(ops []voprOp, code string, before time.Duration) (lo, hi time.Duration) {
	lo, hi = voprLogHold, voprLogHold
	for _, op := range ops {
		if op.kind != "patch-terms" || op.code != code || op.start > before || (op.answer.status >= 400 && op.answer.status < 500) {
			continue
		}
		var body struct {
			HoldTTL string `json:"holdTtl"`
		}
		if json.Unmarshal([]byte(op.detail), &body) != nil || body.HoldTTL == "" {
			continue
		}
		if d, err := time.ParseDuration(body.HoldTTL); err == nil {
			lo, hi = min(lo, d), max(hi, d)
		}
	}
	return lo, hi
}

// checkDeadLetters: no admission of the round's vouchers was dead-lettered,
// open or since replayed or discarded (every record in the log is a 201, and
// a 201 is final), as either ledger lists them.
func (run *voprLogRun) checkDeadLetters() []voprProblem {
	failed, err := run.failed(0, true)
	if err != nil {
		if failed, err = run.failed(1, true); err != nil {
			return []voprProblem{{check: "read", msg: "failed admissions: " + err.Error()}}
		}
	}
	var problems []voprProblem
	for _, f := range failed {
		problems = append(problems, voprProblem{check: "dead-lettered",
			msg: fmt.Sprintf("%s/%s (customer %d) was dead-lettered %s: %s (now %q)",
				f.Code, f.OrderID, f.CustomerID, f.Reason, f.Message, f.Resolution),
			orders: []string{f.OrderID}})
	}
	return problems
}

// repairs: no reconcile repaired anything on the round's vouchers (the
// database's reconcile audit, which every repair by either ledger writes and
// which outlives a ledger's restart, unlike its counters): the reconciler
// runs all along, and a repair means it freed or restored what the system
// had right, or that Redis drifted from the database.
func (run *voprLogRun) repairs() []voprProblem {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lines, err := agreement.Repairs(ctx, run.s.pool, run.codes()...)
	if err != nil {
		return []voprProblem{{check: "read", msg: err.Error()}}
	}
	var problems []voprProblem
	for _, l := range lines {
		problems = append(problems, voprProblem{check: "reconcile repair", msg: l, orders: run.ordersIn(l)})
	}
	return problems
}
