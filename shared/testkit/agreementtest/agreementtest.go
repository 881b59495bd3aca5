// Package agreementtest gives tests RequireAgreement: agreement.Compare polled
// to quiescence, failing the test with every Diff still open.
//
// It is its own package, not part of devstacktest, because package gate's own
// tests import devstacktest, and agreement reads Redis through gate: a
// devstacktest that imported agreement would be an import cycle in gate's
// tests. It is apart from agreement so that the load harness may call Compare
// without linking package testing.
package agreementtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/agreement"
)

// agreementWait is how long RequireAgreement waits for quiescence: background
// steps started by the last request (a give-back after a failed write, a
// post-commit step, a group commit in flight) finish well within 10 s, and an
// admission whose fate a proxy could not learn is settled by the ledger once
// HANGING_GRACE (30 s by default) has passed since the proxy handed it over:
// the wait covers both. A system that agrees returns at once.
const agreementWait = 40 * time.Second

// RequireAgreement fails tb unless, for every code, Redis and the database agree
// (agreement.Compare). It polls until all of them agree or agreementWait has
// passed, so that in-flight background steps may finish, then reports every
// Diff still open. A voucher Redis does not hold fails (see
// RequireAgreementOrUnloaded). Call it when the test has stopped driving the
// vouchers, with the reconciler off: a reconciler that repaired the drift
// first would hide it.
func RequireAgreement(tb testing.TB, rdb redis.UniversalClient, db agreement.Querier, codes ...string) {
	tb.Helper()
	requireAgreement(tb, rdb, db, false, codes)
}

// RequireAgreementOrUnloaded is RequireAgreement for vouchers a test expects
// Redis may not hold (never reserved, or keys deleted on purpose and nothing
// loaded since): an unloaded voucher passes, a loaded one must agree.
func RequireAgreementOrUnloaded(tb testing.TB, rdb redis.UniversalClient, db agreement.Querier, codes ...string) {
	tb.Helper()
	requireAgreement(tb, rdb, db, true, codes)
}

func requireAgreement(tb testing.TB, rdb redis.UniversalClient, db agreement.Querier, unloadedOK bool, codes []string) {
	tb.Helper()
	deadline := time.Now().Add(agreementWait)
	for {
		open := compareAll(rdb, db, unloadedOK, codes)
		if len(open) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("redis and postgres disagree after %s (Redis agrees with Postgres on its own):\n%s",
				agreementWait, strings.Join(open, "\n"))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// compareAll returns one line per code that does not agree (or whose reading failed).
func compareAll(rdb redis.UniversalClient, db agreement.Querier, unloadedOK bool, codes []string) []string {
	var open []string
	for _, code := range codes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := agreement.Compare(ctx, rdb, db, code)
		cancel()
		switch {
		case err != nil:
			open = append(open, code+": "+err.Error())
		case d.OK(), unloadedOK && d.Unloaded():
		default:
			open = append(open, d.String())
		}
	}
	return open
}
