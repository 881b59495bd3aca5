package systemtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// linCheckTimeout bounds one porcupine check. A linearizable history here
// checks in milliseconds (the slowest seen took about 0.15 s); proving that
// one is not can take seconds when the violation lies deep in it, since the
// search must then exhaust every order of the calls before it.
const linCheckTimeout = 4 * time.Second

// nonAlnum matches what a test name must lose to become part of a file name.
var nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)

// checkLinearizable checks ops against spec's model and returns porcupine's
// verdict. On a violation it writes porcupine's visualization and the history
// as text under os.TempDir(), logs their paths and an excerpt, and fails t.
func checkLinearizable(t *testing.T, spec voucherSpec, ops []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	nm := linearizabilityModel(spec)
	model := nm.ToModel()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, linCheckTimeout)
	took := time.Since(start)
	if res == porcupine.Unknown {
		// The search is deterministic for a given history: try once with more
		// time to tell a slow history from a hopeless one.
		t.Logf("check timed out after %v on %d operations; once more with %v", took, len(ops), 3*linCheckTimeout)
		start = time.Now()
		res, info = porcupine.CheckOperationsVerbose(model, ops, 3*linCheckTimeout)
		took = time.Since(start)
	}
	t.Logf("linearizability: %d operations (%d indeterminate), stock %d, per customer %d, exact %v: %s in %v",
		len(ops), countIndeterminate(ops), spec.stock, spec.perUser, spec.exact, res, took.Round(time.Microsecond))
	if res == porcupine.Ok {
		return res
	}
	name := nonAlnum.ReplaceAllString(t.Name(), "_")
	base := filepath.Join(os.TempDir(), fmt.Sprintf("flashgate-linearizability-%s-%d", name, time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, base+".html"); err != nil {
		t.Logf("visualize: %v", err)
	}
	if err := os.WriteFile(base+".txt", []byte(formatLinHistory(ops)), 0o644); err != nil {
		t.Logf("write history: %v", err)
	}
	verdict := "history is not linearizable"
	if res == porcupine.Unknown {
		// Twice out of time: a linearizable history of this size is found in
		// milliseconds, so this is almost surely a violation deep in the
		// history (or the history must shrink).
		verdict = fmt.Sprintf("porcupine could not decide within %v, twice", 3*linCheckTimeout)
	}
	t.Errorf("%s; visualization %s.html, history %s.txt\n%s", verdict, base, base, linExcerpt(ops, info))
	return res
}

// prefix, then the operations it could not place after it (the first to
// return, and everything that started before that one returned).
func linExcerpt(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	type key struct {
		client        int
		call, return_ int64
	}
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	placed := map[key]bool{}
	for _, op := range longest {
		placed[key{op.ClientId, op.Call, op.Return}] = true
	}
	var rest []porcupine.Operation
	for _, op := range ops {
		if !placed[key{op.ClientId, op.Call, op.Return}] {
			rest = append(rest, op)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "longest linearizable prefix: %d of %d operations; its last ones:\n", len(longest), len(ops))
	for _, op := range longest[max(0, len(longest)-12):] {
		b.WriteString("  " + formatLinOp(op) + "\n")
	}
	if len(rest) == 0 {
		return b.String()
	}
	firstReturn := slices.MinFunc(rest, func(a, b porcupine.Operation) int { return int(a.Return - b.Return) }).Return
	var stuck []porcupine.Operation
	for _, op := range rest {
		if op.Call <= firstReturn {
			stuck = append(stuck, op)
		}
	}
	slices.SortFunc(stuck, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	b.WriteString("none of these fits next:\n")
	for _, op := range stuck[:min(len(stuck), 16)] {
		b.WriteString("  " + formatLinOp(op) + "\n")
	}
	return b.String()
}

// checkFinalRetries asserts that every final retry of an order its customer
// holds got its 201, and shows the order's history when one did not.
func checkFinalRetries(t *testing.T, run *linRun) {
	t.Helper()
	refused := 0
	for _, r := range run.retries {
		if r.got.Status == http.StatusCreated {
			continue
		}
		refused++
		var b strings.Builder
		for _, op := range run.h.operations() {
			if op.Input.(linOp).Order == r.op.Order {
				b.WriteString("  " + formatLinOp(op) + "\n")
			}
		}
		t.Errorf("a retry of an order its customer holds, once the system was quiet: %s %s; the order's history:\n%s",
			describeLinOp(r.op, r.got), r.note, b.String())
	}
	t.Logf("final retries of active orders: %d, refused %d", len(run.retries), refused)
}

// checkDivergence reports where Redis's orders differ from the database's
// active ones. Under faults a difference is expected until the reconciler runs,
// so it is only logged; without faults there must be none (strict), since an
// active order Redis lacks has its retries judged as a new order there.
func checkDivergence(t *testing.T, s *stack, code string, strict bool) {
	t.Helper()
	st, loaded, err := s.gate.State(context.Background(), code)
	if err != nil || !loaded {
		t.Logf("redis state of %s: loaded %v, %v", code, loaded, err)
		return
	}
	report := t.Logf
	if strict {
		report = t.Errorf
	}
	inRedis := map[string]bool{}
	for _, o := range st.Orders {
		inRedis[o.OrderID] = true
	}
	rows, err := s.pool.Query(context.Background(), `SELECT order_id FROM voucher_redemption
		WHERE voucher_code = $1 AND status IN ('RESERVED', 'CONFIRMED')`, code)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, id := range ids {
		if !inRedis[id] {
			report("DIVERGENCE: redis lacks %s, which holds a use in the database", id)
		}
		delete(inRedis, id)
	}
	for id := range inRedis {
		report("DIVERGENCE: redis holds %s, which holds no use in the database", id)
	}
	t.Logf("before the final retries: redis remaining %d, db remaining %d", st.Remaining, s.db(t, code).Remaining)
}

// checkFinalState asserts the database's counters against its rows and the
// final reads, and, for a flash voucher, Redis against the database after a
// reconcile.
func checkFinalState(t *testing.T, s *stack, code string, spec voucherSpec, flash bool, run *linRun) {
	t.Helper()
	assert.Empty(t, run.oversells, "the database broke its limits during the run")
	d := s.db(t, code)
	assert.Equal(t, d.Active, d.Used, "used_count = active rows")
	assert.LessOrEqual(t, d.Used, spec.stock, "used_count <= total_limit")
	assert.Equal(t, spec.stock-d.Used, d.Remaining)
	assert.LessOrEqual(t, d.MaxPerCustomer, spec.perUser)

	last := map[uint8]linResult{}
	for _, op := range run.h.operations() {
		if in := op.Input.(linOp); in.Kind == linGet {
			last[in.Order] = op.Output.(linResult) // the final reads are the last reads
		}
	}
	finalActive := 0
	for _, r := range last {
		if r.Code == string(voucher.Reserved) || r.Code == string(voucher.Confirmed) {
			finalActive++
		}
	}
	assert.Equal(t, d.Active, finalActive, "active orders read at the end = active rows")
	t.Logf("final: used %d of %d, most per customer %d; answers: %s", d.Used, spec.stock, d.MaxPerCustomer,
		summarizeLinHistory(run.h.operations()))
	if !flash {
		return
	}
	if s.repairsAllowed() == "" {
		// Redis agrees before the reconcile, on its own: the
		// reconcile is a safety net with nothing to repair.
		agreementtest.RequireAgreement(t, s.rdb, s.pool, code)
	}
	rep := call(t, "POST", s.LedgerURL+"/admin/vouchers/"+code+"/reconcile", ledgerToken, nil)
	require.Equal(t, http.StatusOK, rep.Status, rep.Raw)
	t.Logf("reconcile: %s", rep.Raw)
	assert.EqualValues(t, d.Remaining, s.redisRemaining(t, code), "redis remaining = db remaining after reconcile")
}
