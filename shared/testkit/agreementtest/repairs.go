package agreementtest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/agreement"
)

// RequireNoRepairMetrics fails tb if the ledger whose /metrics is at
// metricsURL counts any reconcile repair (agreement.MetricRepairs). A repair
// means Redis had drifted from the database (Redis agrees with Postgres on its own): with the
// reconciler off, the drift would have been a Diff; with it on, it is a bug
// hidden. Call it while the ledger still runs, after the test's last request.
func RequireNoRepairMetrics(tb testing.TB, metricsURL string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	repairs, err := agreement.MetricRepairs(ctx, http.DefaultClient, metricsURL)
	if err != nil {
		tb.Errorf("%v", err)
	}
	if len(repairs) > 0 {
		tb.Errorf("the ledger at %s repaired Redis, which had drifted from the database (Redis agrees with Postgres on its own):\n\t%s",
			metricsURL, strings.Join(repairs, "\n\t"))
	}
}

// RequireNoRepairAudited fails tb if any reconciler, in any ledger, audited a
// repair (released, restored or reloaded something) of one of codes: the
// database's record of repairs, which also sees a ledger of another test that
// reconciled these vouchers on the same servers.
func RequireNoRepairAudited(tb testing.TB, db agreement.Querier, codes ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	repairs, err := agreement.Repairs(ctx, db, codes...)
	if err != nil {
		tb.Errorf("read reconcile audit: %v", err)
		return
	}
	if len(repairs) > 0 {
		tb.Errorf("a reconciler repaired Redis, which had drifted from the database (Redis agrees with Postgres on its own):\n\t%s",
			strings.Join(repairs, "\n\t"))
	}
}
