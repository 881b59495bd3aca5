package admissions_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/store"
)

// waitFailed waits until the failed list has an open admission of order
// that ok accepts, and returns it.
func waitFailed(l *ledgertest.Ledger, tb testing.TB, order string, ok func(store.FailedAdmission) bool) store.FailedAdmission {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		fs := l.FailedPage(tb, false)
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
	k := ledgertest.NewKafka(t, 2)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	l.AllowRepairs("the test lowers total_limit in the database behind Redis's back")
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 3, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	again := code + "-again-3"
	for i, order := range []string{code + "-again-1", code + "-again-2", again} {
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, int64(i+1), order, 5_000).Status)
	}
	l.Exec(t, `UPDATE voucher SET total_limit = 2 WHERE code = $1`, code)
	l.Store.ForgetTerms(code)
	l.Consume(t)
	l.WaitUsed(t, code, 2)
	first := waitFailed(l, t, again, func(f store.FailedAdmission) bool { return true })
	assert.Equal(t, "OUT_OF_STOCK", first.Reason)
	assert.Equal(t, 1, first.Failures)

	// Redis is given the use back (a reconcile over the raised limit), then
	// the database refuses the replay's record again.
	l.Exec(t, `UPDATE voucher SET total_limit = 3 WHERE code = $1`, code)
	l.Store.ForgetTerms(code)
	r = l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	l.Exec(t, `UPDATE voucher SET total_limit = 2 WHERE code = $1`, code)
	l.Store.ForgetTerms(code)
	r = l.Call(t, http.MethodPost, "/admin/admissions/failed/"+code+"/"+again+"/replay", nil)
	require.Equal(t, http.StatusCreated, r.Status, "replay: %s", r.Raw)

	second := waitFailed(l, t, again, func(f store.FailedAdmission) bool { return f.Failures == 2 })
	assert.Nil(t, second.Resolution, "the admission refused again is open")
	assert.Equal(t, "OUT_OF_STOCK", second.Reason)
	assert.NotEqual(t, first.Offset, second.Offset, "the failure of the replay's record")
	all := ledgertest.FailedOf(l.FailedPage(t, true), code)
	require.Len(t, all, 1, "one row per order: %+v", all)

	// A discard closes it; the voucher's books are put back for the checks.
	r = l.Call(t, http.MethodPost, "/admin/admissions/failed/"+code+"/"+again+"/discard", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Raw)
	l.Exec(t, `UPDATE voucher SET total_limit = 3 WHERE code = $1`, code)
	l.Store.ForgetTerms(code)
	r = l.Call(t, http.MethodPost, "/admin/vouchers/"+code+"/reconcile", nil)
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
	k := ledgertest.NewKafka(t, 1)
	l := ledgertest.New(t, ledgertest.Options{Kafka: k.ListenAddrs()})
	code := ledgertest.NewCode(t)
	r := l.Call(t, http.MethodPost, "/admin/vouchers", ledgertest.PathSpec{VoucherSpec: ledgertest.Spec(code, 10, 1, true), WritePath: "log"})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	l.Checks.AddFlash(code)
	// A CHECK of this test's own: it fires on one order of this voucher only.
	poison, check := "poison-"+code, "ck_poison_"+strings.NewReplacer("-", "_").Replace(strings.ToLower(code))
	l.Exec(t, `ALTER TABLE voucher_redemption ADD CONSTRAINT `+check+` CHECK (order_id <> '`+poison+`') NOT VALID`)
	t.Cleanup(func() { l.Exec(t, `ALTER TABLE voucher_redemption DROP CONSTRAINT `+check) })
	for i, order := range []string{poison, code + "-behind-1", code + "-behind-2"} {
		require.Equal(t, http.StatusCreated, l.Reserve(t, code, int64(i+1), order, 5_000).Status)
	}
	l.Consume(t)
	l.WaitUsed(t, code, 2)
	f := waitFailed(l, t, poison, func(store.FailedAdmission) bool { return true })
	assert.Equal(t, admissions.ReasonRejected, f.Reason)
	assert.Contains(t, f.Message, check)
	st := ledgertest.RedisState(t, l.Gate, code)
	assert.Len(t, st.Orders, 2, "Redis holds the written orders only")
	assert.EqualValues(t, 8, st.Remaining, "the rejected order's use is given back")
}
