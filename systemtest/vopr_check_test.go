package systemtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// pgxTxRepeatableRead reads a round's tables at one moment.
var pgxTxRepeatableRead = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// voprProblem is one broken invariant and the orders it is about.
type voprProblem struct {
	check  string
	msg    string
	orders []string
}

// voprRow is a reservation row as the checks read it.
type voprRow struct {
	order, code, status, reason string
	customer                    int64
	created                     time.Time
}

func (r voprRow) String() string {
	s := fmt.Sprintf("row: voucher %s customer %d %s", r.code, r.customer, r.status)
	if r.reason != "" {
		s += " (" + r.reason + ")"
	}
	return s + " created " + r.created.UTC().Format("15:04:05.000000")
}

// voprDB is what the database holds for a round, read at one moment.
type voprDB struct {
	rows     map[string]voprRow // by orderId
	dupes    []string           // orderIds with more than one row
	vouchers map[string]struct{ total, used, perUser int }
	usage    map[string]map[int64][2]int // code -> customer -> {used_count, per_user_limit}
}

// awaitChecks polls the checks until they all pass at once or timeout has
// passed (quiescence: expiries, in-flight give-backs and parked writes
// settle), and returns the last problems found.
func (run *voprRun) awaitChecks(t *testing.T, when string, timeout time.Duration) []voprProblem {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for polls := 1; ; polls++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		problems := run.check(ctx)
		cancel()
		if len(problems) == 0 {
			t.Logf("checks (%s) passed at poll %d", when, polls)
			return nil
		}
		if time.Now().After(deadline) {
			t.Logf("checks (%s) still failing after %d polls over %v", when, polls, timeout)
			return problems
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// check runs every check once.
func (run *voprRun) check(ctx context.Context) []voprProblem {
	db, err := run.readDB(ctx)
	if err != nil {
		return []voprProblem{{check: "read", msg: err.Error()}}
	}
	problems := run.checkVouchers(db)
	problems = append(problems, run.checkCustomers(db)...)
	problems = append(problems, run.checkAnswers(db)...)
	if run.moreChecks != nil {
		problems = append(problems, run.moreChecks(ctx, db)...)
	}
	for _, v := range run.r.vouchers {
		if !v.flash {
			continue
		}
		if err := agree(ctx, run.s.rdb, run.s.pool, v.code); err != nil {
			problems = append(problems, voprProblem{check: "agreement", msg: v.code + ": " + err.Error(),
				orders: run.ordersIn(err.Error())})
		}
	}
	return problems
}

func (run *voprRun) codes() []string {
	codes := make([]string, len(run.r.vouchers))
	for i, v := range run.r.vouchers {
		codes[i] = v.code
	}
	return codes
}

// readDB reads the round's rows (by orderId prefix, wherever they landed),
// vouchers and usage rows in one repeatable-read transaction.
func (run *voprRun) readDB(ctx context.Context) (*voprDB, error) {
	tx, err := run.s.pool.BeginTx(ctx, pgxTxRepeatableRead)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	db := &voprDB{rows: map[string]voprRow{}, vouchers: map[string]struct{ total, used, perUser int }{},
		usage: map[string]map[int64][2]int{}}
	prefix := run.r.orderID(0)
	prefix = prefix[:len(prefix)-1]
	rows, err := tx.Query(ctx, `SELECT order_id, voucher_code, customer_id, status, coalesce(release_reason, ''), created_at
		FROM voucher_redemption WHERE left(order_id, $2) = $1`, prefix, len(prefix))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var r voprRow
		if err := rows.Scan(&r.order, &r.code, &r.customer, &r.status, &r.reason, &r.created); err != nil {
			rows.Close()
			return nil, err
		}
		if _, dup := db.rows[r.order]; dup {
			db.dupes = append(db.dupes, r.order)
		}
		db.rows[r.order] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT code, total_limit, used_count, per_user_limit FROM voucher WHERE code = ANY($1)`, run.codes())
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var code string
		var v struct{ total, used, perUser int }
		if err := rows.Scan(&code, &v.total, &v.used, &v.perUser); err != nil {
			rows.Close()
			return nil, err
		}
		db.vouchers[code] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, `SELECT voucher_code, customer_id, used_count, per_user_limit
		FROM voucher_customer_usage WHERE voucher_code = ANY($1)`, run.codes())
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var code string
		var c int64
		var u [2]int
		if err := rows.Scan(&code, &c, &u[0], &u[1]); err != nil {
			rows.Close()
			return nil, err
		}
		if db.usage[code] == nil {
			db.usage[code] = map[int64][2]int{}
		}
		db.usage[code][c] = u
	}
	rows.Close()
	return db, rows.Err()
}

func voprActive(status string) bool { return status == "RESERVED" || status == "CONFIRMED" }

// activeRows returns the active rows of code, by customer.
func (db *voprDB) activeRows(code string) map[int64][]voprRow {
	out := map[int64][]voprRow{}
	for _, r := range db.rows {
		if r.code == code && voprActive(r.status) {
			out[r.customer] = append(out[r.customer], r)
		}
	}
	return out
}

func rowOrders(rs []voprRow) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.order
	}
	sort.Strings(ids)
	return ids
}

// checkVouchers: used_count = the active rows, 0 <= used_count <= total_limit,
// one row per orderId.
func (run *voprRun) checkVouchers(db *voprDB) []voprProblem {
	var problems []voprProblem
	for _, id := range db.dupes {
		problems = append(problems, voprProblem{check: "unique order", msg: "orderId " + id + " has two rows", orders: []string{id}})
	}
	for _, code := range run.codes() {
		v, ok := db.vouchers[code]
		if !ok {
			problems = append(problems, voprProblem{check: "voucher", msg: code + " has no row"})
			continue
		}
		var active []voprRow
		for _, rs := range db.activeRows(code) {
			active = append(active, rs...)
		}
		if v.used != len(active) {
			problems = append(problems, voprProblem{check: "used_count",
				msg:    fmt.Sprintf("%s: used_count %d, active rows %d", code, v.used, len(active)),
				orders: rowOrders(active)})
		}
		if v.used > v.total || v.used < 0 {
			problems = append(problems, voprProblem{check: "total_limit",
				msg: fmt.Sprintf("%s: used_count %d, total_limit %d", code, v.used, v.total), orders: rowOrders(active)})
		}
	}
	return problems
}

// checkCustomers: each customer's usage row counts their active rows, within
// its per_user_limit, and a customer holds no more than the voucher's limit
// allows. A limit lowered under uses already held keeps them (the ledger
// raises the row's per_user_limit to them): so the bound is the current limit
// or, if higher, the customer's active rows that existed when the last
// perUserLimit change can have committed.
func (run *voprRun) checkCustomers(db *voprDB) []voprProblem {
	run.mu.Lock()
	changed := map[string]time.Time{}
	for k, v := range run.perUserChanged {
		changed[k] = v
	}
	run.mu.Unlock()
	var problems []voprProblem
	for _, code := range run.codes() {
		v := db.vouchers[code]
		active := db.activeRows(code)
		customers := map[int64]bool{}
		for c := range active {
			customers[c] = true
		}
		for c := range db.usage[code] {
			customers[c] = true
		}
		for c := range customers {
			rs, u := active[c], db.usage[code][c]
			if u[0] != len(rs) {
				problems = append(problems, voprProblem{check: "usage",
					msg:    fmt.Sprintf("%s customer %d: usage used_count %d, active rows %d", code, c, u[0], len(rs)),
					orders: rowOrders(rs)})
			}
			if u[0] > u[1] {
				problems = append(problems, voprProblem{check: "usage limit",
					msg: fmt.Sprintf("%s customer %d: usage used_count %d > its per_user_limit %d", code, c, u[0], u[1]), orders: rowOrders(rs)})
			}
			bound, held := v.perUser, 0
			if at, ok := changed[code]; ok {
				for _, r := range rs {
					if (run.heldBefore == nil && !r.created.After(at)) || (run.heldBefore != nil && run.heldBefore(r, at)) {
						held++
					}
				}
				bound = max(bound, held)
			}
			if len(rs) > bound {
				problems = append(problems, voprProblem{check: "per-user limit",
					msg: fmt.Sprintf("%s customer %d holds %d uses, per_user_limit %d (%d held before the last perUserLimit change)",
						code, c, len(rs), v.perUser, held), orders: rowOrders(rs)})
			}
		}
	}
	return problems
}

// checkAnswers holds the rows to what the drivers were answered: every 201
// has its row (on that voucher, for that customer) and no later call of the
// order is answered 404; a confirm answered 200 ends CONFIRMED or REFUNDED, a
// release answered 204 had a row and never ends active, a refund answered 200
// ends REFUNDED.
func (run *voprRun) checkAnswers(db *voprDB) []voprProblem {
	type key struct{ code, order string }
	created := map[key]time.Duration{} // the earliest return of a 201
	ops := run.h.all()
	for _, op := range ops {
		if strings.HasPrefix(op.kind, "reserve") && op.answer.status == http.StatusCreated {
			k := key{op.code, op.order}
			if at, ok := created[k]; !ok || op.end < at {
				created[k] = op.end
			}
		}
	}
	var problems []voprProblem
	seen := map[string]bool{}
	add := func(check, order, msg string) {
		if !seen[check+order] {
			seen[check+order] = true
			problems = append(problems, voprProblem{check: check, msg: msg, orders: []string{order}})
		}
	}
	for _, op := range ops {
		row, ok := db.rows[op.order]
		base, _, _ := strings.Cut(op.kind, "-")
		a := op.answer
		switch {
		case op.order == "":
		case base == "reserve" && a.status == http.StatusCreated:
			if !ok || row.code != op.code || row.customer != op.customer {
				add("201 without its row", op.order, fmt.Sprintf("#%d %s answered 201 for customer %d on %s; %s",
					op.id, op.order, op.customer, op.code, describeRow(row, ok)))
			}
		case a.status == http.StatusNotFound && a.code == "RESERVATION_NOT_FOUND":
			if at, was := created[key{op.code, op.order}]; was && op.start > at {
				add("404 after 201", op.order, fmt.Sprintf("#%d %s of %s answered 404 RESERVATION_NOT_FOUND after a 201 returned at %v",
					op.id, op.kind, op.order, at.Round(time.Microsecond)))
			}
		case base == "confirm" && a.status == http.StatusOK:
			if !ok || row.code != op.code || (row.status != "CONFIRMED" && row.status != "REFUNDED") {
				add("confirmed then lost", op.order, fmt.Sprintf("#%d confirm of %s answered 200 %s; %s",
					op.id, op.order, a.resState, describeRow(row, ok)))
			}
		case base == "release" && a.status == http.StatusNoContent:
			if !ok || row.code != op.code {
				add("204 without its row", op.order, fmt.Sprintf("#%d release of %s on %s answered 204; %s",
					op.id, op.order, op.code, describeRow(row, ok)))
			} else if row.status != "RELEASED" && row.status != "REFUNDED" {
				add("cancelled then active", op.order, fmt.Sprintf("#%d release of %s answered 204; %s",
					op.id, op.order, describeRow(row, ok)))
			}
		case base == "refund" && a.status == http.StatusOK:
			if !ok || row.code != op.code || row.status != "REFUNDED" {
				add("refunded then lost", op.order, fmt.Sprintf("#%d refund of %s answered 200; %s",
					op.id, op.order, describeRow(row, ok)))
			}
		}
	}
	return problems
}

func describeRow(r voprRow, ok bool) string {
	if !ok {
		return "no row"
	}
	return r.String()
}

// ordersIn returns the round's orderIds named in msg.
func (run *voprRun) ordersIn(msg string) []string {
	prefix := run.r.orderID(0)
	prefix = prefix[:len(prefix)-1]
	var ids []string
	seen := map[string]bool{}
	for _, f := range strings.FieldsFunc(msg, func(r rune) bool {
		return r == ' ' || r == ',' || r == ';' || r == '(' || r == ')' || r == '"' || r == ':' || r == '[' || r == ']'
	}) {
		if strings.HasPrefix(f, prefix) && !seen[f] {
			seen[f] = true
			ids = append(ids, f)
		}
	}
	return ids
}

// report describes problems with the history of each order they name (its
// row now, its calls, and the operator's and faults' calls on its voucher
// meanwhile), and writes the whole history to a file.
func (run *voprRun) report(problems []voprProblem) string {
	ops := run.h.all()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := run.readDB(ctx)
	var b strings.Builder
	fmt.Fprintf(&b, "the round started at %s (the calls' times are since then)\n", run.h.start.UTC().Format("15:04:05.000000"))
	for i, p := range problems {
		if i == 20 {
			fmt.Fprintf(&b, "... and %d more problems\n", len(problems)-i)
			break
		}
		fmt.Fprintf(&b, "[%s] %s\n", p.check, p.msg)
		for j, id := range p.orders {
			if j == 6 {
				fmt.Fprintf(&b, "    ... and %d more orders\n", len(p.orders)-j)
				break
			}
			row, ok := voprRow{}, false
			if err == nil {
				row, ok = db.rows[id]
			}
			fmt.Fprintf(&b, "  order %s, %s:\n", id, describeRow(row, ok))
			for _, line := range orderHistory(ops, id) {
				b.WriteString("    " + line + "\n")
			}
		}
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("flashgate-vopr-seed%d-%d.txt", run.r.seed, time.Now().UnixNano()))
	if f, ferr := os.Create(path); ferr == nil {
		w := bufio.NewWriter(f)
		fmt.Fprintf(w, "%s\n%s\n\nevery problem:\n", run.r, run.r.reproduce())
		for _, p := range problems {
			fmt.Fprintf(w, "[%s] %s\n", p.check, p.msg)
		}
		fmt.Fprintf(w, "\n%s\nhistory:\n", b.String())
		for _, op := range ops {
			fmt.Fprintln(w, op)
		}
		w.Flush()
		f.Close()
		fmt.Fprintf(&b, "whole history: %s\n", path)
	}
	return b.String()
}

// orderHistory is an order's calls (marked *), all of them, with the
// voucher-wide calls (operator, faults) on the vouchers it was sent to that
// overlap one of them or end shortly before it starts.
func orderHistory(ops []voprOp, id string) []string {
	var own []voprOp
	for _, op := range ops {
		if op.order == id {
			own = append(own, op)
		}
	}
	near := func(op voprOp) bool {
		for _, o := range own {
			// A call on no voucher (a log round's fault) strikes them all.
			if (o.code == op.code || op.code == "") && op.end >= o.start-100*time.Millisecond && op.start <= o.end {
				return true
			}
		}
		return false
	}
	var around []voprOp
	for _, op := range ops {
		if op.order == "" && near(op) {
			around = append(around, op)
		}
	}
	if len(own)+len(around) > 120 {
		around = nil // the order's own calls matter most
	}
	all := append(own, around...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].start < all[j].start })
	lines := make([]string, len(all))
	for i, op := range all {
		mark := "  "
		if op.order == id {
			mark = "* "
		}
		lines[i] = mark + op.String()
	}
	return lines
}

// reconcileFixes sums the ledger's flashgate_reconcile_fixes_total (and
// flashgate_reconcile_repairs_total, if it has one) over their labels.
func reconcileFixes(t *testing.T, s *voprStack) float64 {
	t.Helper()
	r := call(t, http.MethodGet, s.LedgerURL+"/metrics", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var sum float64
	for _, line := range strings.Split(r.Raw, "\n") {
		if !strings.HasPrefix(line, "flashgate_reconcile_fixes_total") && !strings.HasPrefix(line, "flashgate_reconcile_repairs_total") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		require.NoError(t, err, line)
		sum += v
	}
	return sum
}

// deadlocks reports the deadlocks Postgres broke (SQLSTATE 40P01) that the
// services logged since offset from of their log, each with the round's calls
// in flight on the voucher it names at that moment: two of the ledger's own
// statements locking one voucher's rows in opposite orders are a bug even
// when the failed write is cleaned up after.
func (run *voprRun) deadlocks(path string, from int64) []voprProblem {
	f, err := os.Open(path)
	if err != nil {
		return []voprProblem{{check: "deadlock", msg: err.Error()}}
	}
	defer f.Close()
	if _, err := f.Seek(from, 0); err != nil {
		return []voprProblem{{check: "deadlock", msg: err.Error()}}
	}
	var problems []voprProblem
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "40P01") && !strings.Contains(line, "deadlock detected") {
			continue
		}
		if len(problems) == 5 {
			problems = append(problems, voprProblem{check: "deadlock", msg: "... and more"})
			break
		}
		problems = append(problems, voprProblem{check: "deadlock",
			msg: "the services logged a deadlock: " + line + run.inFlight(line)})
	}
	return problems
}

// inFlight lists the calls on the round's voucher that a log line names
// which were in flight at the line's time.
func (run *voprRun) inFlight(line string) string {
	var logged struct {
		Time time.Time `json:"time"`
	}
	_, js, _ := strings.Cut(line, "] ")
	if json.Unmarshal([]byte(js), &logged) != nil {
		return ""
	}
	at := logged.Time.Sub(run.h.start)
	var b strings.Builder
	for _, op := range run.h.all() {
		if names(line, op.code) && op.start <= at && at <= op.end+5*time.Millisecond {
			b.WriteString("\n    in flight: " + op.String())
		}
	}
	return b.String()
}

// names reports whether a log line names voucher code: as "CODE/ORDER",
// "CODE:" or "CODE" in quotes, not as the prefix of the round's orderIds.
func names(line, code string) bool {
	return strings.Contains(line, code+"/") || strings.Contains(line, code+":") || strings.Contains(line, code+`"`)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
