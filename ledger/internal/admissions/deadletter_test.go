package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/store"
)

// failedPage reads GET /admin/admissions/failed (all: the resolved too).
func (l *testLedger) failedPage(tb testing.TB, all bool) []store.FailedAdmission {
	tb.Helper()
	path := "/admin/admissions/failed"
	if all {
		path += "?all=true"
	}
	r := l.call(tb, http.MethodGet, path, nil)
	require.Equal(tb, http.StatusOK, r.Status, r.Raw)
	var page struct {
		Admissions []store.FailedAdmission `json:"admissions"`
	}
	require.NoError(tb, json.Unmarshal([]byte(r.Raw), &page))
	return page.Admissions
}

// failedOf is the failed admissions of voucher code among fs.
func failedOf(fs []store.FailedAdmission, code string) []store.FailedAdmission {
	var mine []store.FailedAdmission
	for _, f := range fs {
		if f.Code == code {
			mine = append(mine, f)
		}
	}
	return mine
}

// waitFailed waits until the failed list has an open admission of order
// that ok accepts, and returns it.
func (l *testLedger) waitFailed(tb testing.TB, order string, ok func(store.FailedAdmission) bool) store.FailedAdmission {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		fs := l.failedPage(tb, false)
		for _, f := range fs {
			if f.OrderID == order && ok(f) {
				return f
			}
		}
		if time.Now().After(deadline) {
			require.Failf(tb, "no such failed admission", "order %s in %+v", order, fs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLogPathReplayRefusedAgain: a replayed admission that the consumer
// refuses again is listed open again with its new failure (the replay's
// record, failures 2), not left behind its "replayed" resolution while the
// dead-letter topic grows.
func TestLogPathReplayRefusedAgain(t *testing.T) {
	t.Parallel()
	k := newKafka(t, 2)
	l := newTestLedger(t, ledgerOptions{kafka: k.ListenAddrs()})
	l.allowRepairs("the test lowers total_limit in the database behind Redis's back")
	code := newCode(t)
	r := l.call(t, http.MethodPost, "/admin/vouchers", pathSpec{spec(code, 3, 1, true), "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.checks.addFlash(code)
	again := code + "-again-3"
	for i, order := range []string{code + "-again-1", code + "-again-2", again} {
		require.Equal(t, http.StatusCreated, l.reserve(t, code, int64(i+1), order, 5_000).Status)
	}
	l.exec(t, `UPDATE voucher SET total_limit = 2 WHERE code = $1`, code)
	l.store.ForgetTerms(code)
	l.consume(t)
	l.waitUsed(t, code, 2)
	first := l.waitFailed(t, again, func(f store.FailedAdmission) bool { return true })
	assert.Equal(t, "OUT_OF_STOCK", first.Reason)
	assert.Equal(t, 1, first.Failures)

	// Redis is given the use back (a reconcile over the raised limit), then
	// the database refuses the replay's record again.
	l.exec(t, `UPDATE voucher SET total_limit = 3 WHERE code = $1`, code)
	l.store.ForgetTerms(code)
	r = l.call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	l.exec(t, `UPDATE voucher SET total_limit = 2 WHERE code = $1`, code)
	l.store.ForgetTerms(code)
	r = l.call(t, http.MethodPost, "/admin/admissions/failed/"+code+"/"+again+"/replay", nil)
	require.Equal(t, http.StatusCreated, r.Status, "replay: %s", r.Raw)

	second := l.waitFailed(t, again, func(f store.FailedAdmission) bool { return f.Failures == 2 })
	assert.Nil(t, second.Resolution, "the admission refused again is open")
	assert.Equal(t, "OUT_OF_STOCK", second.Reason)
	assert.NotEqual(t, first.Offset, second.Offset, "the failure of the replay's record")
	all := failedOf(l.failedPage(t, true), code)
	require.Len(t, all, 1, "one row per order: %+v", all)

	// A discard closes it; the voucher's books are put back for the checks.
	r = l.call(t, http.MethodPost, "/admin/admissions/failed/"+code+"/"+again+"/discard", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	l.exec(t, `UPDATE voucher SET total_limit = 3 WHERE code = $1`, code)
	l.store.ForgetTerms(code)
	r = l.call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
}

// TestLogPathUnmappedCheckDeadLetters: a record the database refuses with an
// error no answer maps (a CHECK the ledger does not know, as a negative
// orderAmount breaks ck_order_amount once nothing checks it first) is
// dead-lettered with the error and its use given back, and the records of
// its partition behind it are written: it does not block the partition's
// poll loop forever.
func TestLogPathUnmappedCheckDeadLetters(t *testing.T) {
	t.Parallel()
	k := newKafka(t, 1)
	l := newTestLedger(t, ledgerOptions{kafka: k.ListenAddrs()})
	code := newCode(t)
	r := l.call(t, http.MethodPost, "/admin/vouchers", pathSpec{spec(code, 10, 1, true), "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.checks.addFlash(code)
	// A CHECK of this test's own: it fires on one order of this voucher only.
	poison, check := "poison-"+code, "ck_poison_"+strings.NewReplacer("-", "_").Replace(strings.ToLower(code))
	l.exec(t, `ALTER TABLE voucher_redemption ADD CONSTRAINT `+check+` CHECK (order_id <> '`+poison+`') NOT VALID`)
	t.Cleanup(func() { l.exec(t, `ALTER TABLE voucher_redemption DROP CONSTRAINT `+check) })
	for i, order := range []string{poison, code + "-behind-1", code + "-behind-2"} {
		require.Equal(t, http.StatusCreated, l.reserve(t, code, int64(i+1), order, 5_000).Status)
	}
	l.consume(t)
	l.waitUsed(t, code, 2)
	f := l.waitFailed(t, poison, func(store.FailedAdmission) bool { return true })
	assert.Equal(t, admissions.ReasonRejected, f.Reason)
	assert.Contains(t, f.Message, check)
	st := redisState(t, l.gate, code)
	assert.Len(t, st.Orders, 2, "Redis holds the written orders only")
	assert.EqualValues(t, 8, st.Remaining, "the rejected order's use is given back")
}
