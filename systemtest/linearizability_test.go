package systemtest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/voucher"
)

// linSoldOutTTL is the proxy's SOLDOUT_TTL in these tests: short, so that the
// window in which the model lets the flag refuse a retry stays tight, while the
// flag still answers refusals during a sell-out.
const linSoldOutTTL = 50 * time.Millisecond

// linFlagWindow adds the proxy's REDIS_TIMEOUT (redisTimeout): flagSoldOut
// reads its snapshot with one Redis call under that deadline before it sets
// the flag, so the snapshot can be that much older than the flag.
const linFlagWindow = linSoldOutTTL + redisTimeout

// Seeded runs against flash vouchers (through the Redis gate, coalescing on)
// and one against a standard voucher (the ledger's guarded transaction, so its
// refusals must be exact).
func TestLinearizabilityNoFaults(t *testing.T) {
	s := newStack(t, stackOptions{coalesce: true, soldOutTTL: linSoldOutTTL})
	w := linWorkload{clients: 6, customers: 4, orders: 24, window: 6, ops: 300, think: 4 * time.Millisecond}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("flash/seed=%d", seed), func(t *testing.T) {
			spec := voucherSpec{stock: 5, perUser: 2, flagWindow: linFlagWindow}
			code := newCode(t)
			s.createVoucher(t, code, spec.stock, spec.perUser, true)
			w := w
			w.seed = seed
			run := runLinearizability(t, s, code, spec, true, w, nil)
			ops := run.h.operations()
			checkLinearizable(t, spec, ops)
			run.retryActive(spec)
			checkFinalRetries(t, run)
			checkFinalState(t, s, code, spec, true, run)
		})
	}
	t.Run("standard", func(t *testing.T) {
		spec := voucherSpec{stock: 5, perUser: 2, exact: true}
		code := newCode(t)
		s.createVoucher(t, code, spec.stock, spec.perUser, false)
		w := w
		w.seed = 4
		run := runLinearizability(t, s, code, spec, false, w, nil)
		ops := run.h.operations()
		checkLinearizable(t, spec, ops)
		run.retryActive(spec)
		checkFinalRetries(t, run)
		checkFinalState(t, s, code, spec, false, run)
	})
}

// Redis killed (no persistence: it comes back empty) and the ledger killed,
// each restarted, while the clients run.
func TestLinearizabilityWithFaults(t *testing.T) {
	rs := devstacktest.NewRedis(t, devstack.RedisOptions{})
	s := newStack(t, stackOptions{coalesce: true, redisURL: rs.URL(), soldOutTTL: linSoldOutTTL,
		// Nothing is in flight when the test reconciles at the end, so an
		// admission without a row can be freed once the grace passed (its
		// floor is 1s; the proxies' LEDGER_TIMEOUT of 1s stays below it).
		ledgerEnv: []string{"HANGING_GRACE=2s"}})
	// Exempt from "no repair": Redis comes back empty and the ledger is killed
	// mid-write on purpose; agreement after the final reconcile still holds.
	s.allowRepairs("redis and the ledger are killed mid-run")
	spec := voucherSpec{stock: 5, perUser: 2, flagWindow: linFlagWindow}
	code := newCode(t)
	s.createVoucher(t, code, spec.stock, spec.perUser, true)
	w := linWorkload{seed: 5, clients: 6, customers: 4, orders: 24, window: 6, ops: 300, think: 4 * time.Millisecond}

	run := runLinearizability(t, s, code, spec, true, w, func(waitOps func(int), now func() time.Duration) {
		waitOps(60)
		t.Logf("%v: kill -9 redis", now())
		assert.NoError(t, rs.Kill())
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, rs.Restart())
		t.Logf("%v: redis restarted, empty", now())
		waitOps(160)
		t.Logf("%v: kill -9 ledger", now())
		assert.NoError(t, s.Ledger.Kill())
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, s.Ledger.Restart())
		t.Logf("%v: ledger restarted", now())
	})
	ops := run.h.operations()
	checkLinearizable(t, spec, ops)
	// Redis lost its data mid-run: an admission whose write committed after
	// the reload is missing there until the reconciler restores it (the
	// design's recovery), so the retries come after one reconcile.
	time.Sleep(2 * time.Second) // past HANGING_GRACE
	// A busy machine can answer it 503 (a database deadline): an operator
	// asks again, as does this test, a few times.
	rep := call(t, "POST", s.LedgerURL+"/admin/vouchers/"+code+"/reconcile", ledgerToken, nil)
	for try := 0; rep.Status == http.StatusServiceUnavailable && try < 10; try++ {
		time.Sleep(200 * time.Millisecond)
		rep = call(t, "POST", s.LedgerURL+"/admin/vouchers/"+code+"/reconcile", ledgerToken, nil)
	}
	require.Equal(t, http.StatusOK, rep.Status, rep.Raw)
	t.Logf("reconcile before the final retries: %s", rep.Raw)
	run.retryActive(spec)
	checkFinalRetries(t, run)
	checkFinalState(t, s, code, spec, true, run)
}

// The checker itself: hand-made histories that oversell or consume a use twice
// must be reported, and legal ones (indeterminate calls included) accepted.
func TestLinearizabilityCheckerCatchesBugs(t *testing.T) {
	type opSpec struct {
		client    int
		call, ret int64
		op        linOp
		r         linResult
	}
	build := func(specs []opSpec) []porcupine.Operation {
		var end int64
		for _, s := range specs {
			end = max(end, s.ret)
		}
		ops := make([]porcupine.Operation, len(specs))
		for i, s := range specs {
			if s.r.indeterminate() {
				s.ret = end + 1
			}
			ops[i] = porcupine.Operation{ClientId: s.client, Input: s.op, Call: s.call, Output: s.r, Return: s.ret}
		}
		stampTimes(ops)
		markContested(ops)
		return ops
	}
	res := func(kind linKind, c, o uint8) linOp { return linOp{Kind: kind, Customer: c, Order: o} }
	created := linResult{Status: 201}
	released := linResult{Status: 204}
	confirmed := linResult{Status: 200, Code: "CONFIRMED"}
	outOfStock := linResult{Status: 409, Code: voucher.CodeOutOfStock}
	unknown := linResult{}

	flash := voucherSpec{stock: 3, perUser: 1}
	standard := voucherSpec{stock: 3, perUser: 1, exact: true}

	// stock + 1 concurrent 201s for distinct orders, with an indeterminate
	// reserve that cannot make room.
	oversell := []opSpec{{client: 4, call: 0, op: res(linReserve, 5, 5), r: unknown}}
	for i := range flash.stock + 1 {
		oversell = append(oversell, opSpec{client: i, call: 10, ret: 20, op: res(linReserve, uint8(i+1), uint8(i)), r: created})
	}
	// A released order confirmed late although its use went to another
	// order: two orders on one use.
	one := voucherSpec{stock: 1, perUser: 1}
	lateDouble := []opSpec{
		{client: 0, call: 0, ret: 10, op: res(linReserve, 1, 0), r: created},
		{client: 0, call: 20, ret: 30, op: res(linRelease, 0, 0), r: released},
		{client: 1, call: 40, ret: 50, op: res(linReserve, 2, 1), r: created},
		{client: 0, call: 60, ret: 70, op: res(linConfirm, 0, 0), r: confirmed},
	}
	// A retry that consumed a second use: the next order is refused with a
	// use left, which only a standard voucher's exact model can tell.
	retryDouble := []opSpec{
		{client: 0, call: 0, ret: 10, op: res(linReserve, 1, 0), r: created},
		{client: 0, call: 20, ret: 30, op: res(linReserve, 1, 0), r: created},
		{client: 1, call: 40, ret: 50, op: res(linReserve, 2, 1), r: created},
		{client: 2, call: 60, ret: 70, op: res(linReserve, 3, 2), r: outOfStock},
	}
	// Legal: an indeterminate reserve that took effect, seen by a get, then
	// stock gone; and a retry refused after its order holds a use is not.
	legal := []opSpec{
		{client: 0, call: 0, op: res(linReserve, 1, 0), r: unknown},
		{client: 1, call: 10, ret: 20, op: res(linGet, 0, 0), r: linResult{Status: 200, Code: "RESERVED", Customer: 1}},
		{client: 1, call: 30, ret: 40, op: res(linReserve, 2, 1), r: outOfStock},
		{client: 1, call: 50, ret: 60, op: res(linConfirm, 0, 0), r: confirmed},
	}
	retryRefused := append(slices.Clone(legal[:2]),
		opSpec{client: 0, call: 30, ret: 40, op: res(linReserve, 1, 0), r: outOfStock})
	// The sold-out flag may refuse a retry of a held order shortly after the
	// order became active (here within 15 ns), not later.
	flagged := voucherSpec{stock: 1, perUser: 1, flagWindow: 15}
	flagRefusal := func(at int64) []opSpec {
		return []opSpec{
			{client: 0, call: 0, ret: 10, op: res(linReserve, 1, 0), r: created},
			{client: 1, call: at, ret: at + 2, op: res(linReserve, 1, 0), r: outOfStock},
		}
	}
	// ORDER_CONFLICT while another customer's claim is in flight, then the
	// order is not there (the claim's write was refused) ...
	conflict := linResult{Status: 409, Code: voucher.CodeOrderConflict}
	notFound := linResult{Status: 404, Code: voucher.CodeReservationNotFound}
	inFlight := []opSpec{
		{client: 0, call: 0, ret: 30, op: res(linReserve, 1, 0), r: outOfStock},
		{client: 1, call: 10, ret: 20, op: res(linReserve, 2, 0), r: conflict},
		{client: 1, call: 40, ret: 50, op: res(linGet, 0, 0), r: notFound},
	}
	// ... but not with nobody claiming it.
	noClaimer := []opSpec{
		{client: 1, call: 10, ret: 20, op: res(linReserve, 2, 0), r: conflict},
		{client: 1, call: 40, ret: 50, op: res(linGet, 0, 0), r: notFound},
	}

	for _, tc := range []struct {
		name string
		spec voucherSpec
		ops  []opSpec
		want porcupine.CheckResult
	}{
		{"oversell", flash, oversell, porcupine.Illegal},
		{"oversell standard", standard, oversell, porcupine.Illegal},
		{"late confirm double consume", one, lateDouble, porcupine.Illegal},
		{"retry double consume standard", standard, retryDouble, porcupine.Illegal},
		{"retry double consume flash (undersell is allowed)", flash, retryDouble, porcupine.Ok},
		{"indeterminate took effect", one, legal, porcupine.Ok},
		{"retry of a held order refused", one, retryRefused, porcupine.Illegal},
		{"retry refused by a fresh flag", flagged, flagRefusal(20), porcupine.Ok},
		{"retry refused by a flag past its window", flagged, flagRefusal(40), porcupine.Illegal},
		{"retry refused by a flag, standard", voucherSpec{stock: 1, perUser: 1, flagWindow: 15, exact: true}, flagRefusal(20), porcupine.Illegal},
		{"conflict with a claim in flight", one, inFlight, porcupine.Ok},
		{"conflict without a claimer", one, noClaimer, porcupine.Illegal},
		{"conflict with a claim in flight, standard", voucherSpec{stock: 1, perUser: 1, exact: true}, inFlight, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops := build(tc.ops)
			nm := linearizabilityModel(tc.spec)
			model := nm.ToModel()
			got, info := porcupine.CheckOperationsVerbose(model, ops, linCheckTimeout)
			assert.Equal(t, tc.want, got, "Check(%s) = %v, want %v", tc.name, got, tc.want)
			if got == porcupine.Illegal {
				// The failure path writes a visualization.
				path := filepath.Join(t.TempDir(), "history.html")
				require.NoError(t, porcupine.VisualizePath(model, info, path))
				fi, err := os.Stat(path)
				require.NoError(t, err)
				assert.Positive(t, fi.Size())
				assert.Contains(t, linExcerpt(ops, info), "none of these fits next")
			}
		})
	}
}
