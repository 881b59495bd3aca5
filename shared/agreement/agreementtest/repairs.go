package agreementtest

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/agreement"
)

// repairMetrics are the ledger's counters of what its reconciler repaired:
// fixes_total{kind=released|restored|reloaded} and, where a ledger exports it,
// repairs_total{kind}.
var repairMetrics = []string{"flashgate_reconcile_fixes_total", "flashgate_reconcile_repairs_total"}

// RequireNoRepairMetrics fails tb if the ledger whose /metrics is at
// metricsURL counts any reconcile repair. A repair means Redis had drifted
// from the database (DESIGN.md principle 5): with the reconciler off, the
// drift would have been a Diff; with it on, it is a bug hidden. Call it while
// the ledger still runs, after the test's last request.
func RequireNoRepairMetrics(tb testing.TB, metricsURL string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		tb.Errorf("scrape %s: %v", metricsURL, err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Errorf("scrape %s: %v", metricsURL, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Errorf("scrape %s: status %d", metricsURL, resp.StatusCode)
		return
	}
	var repairs []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, name := range repairMetrics {
			if line != name && !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err != nil || v != 0 {
				repairs = append(repairs, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		tb.Errorf("scrape %s: %v", metricsURL, err)
	}
	if len(repairs) > 0 {
		tb.Errorf("the ledger at %s repaired Redis, which had drifted from the database (DESIGN.md principle 5):\n\t%s",
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
		tb.Errorf("a reconciler repaired Redis, which had drifted from the database (DESIGN.md principle 5):\n\t%s",
			strings.Join(repairs, "\n\t"))
	}
}
