package agreement

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// RepairMetrics are the ledger's counters of what its reconciler repaired:
// flashgate_reconcile_fixes_total{action} (released, restored, reloaded) and
// flashgate_reconcile_repairs_total{kind}.
var RepairMetrics = []string{"flashgate_reconcile_fixes_total", "flashgate_reconcile_repairs_total"}

// MetricRepairs scrapes a ledger's /metrics (metricsURL) and returns the
// lines of RepairMetrics that count a repair (a value other than 0). With the
// reconciler off, any such line means Redis had drifted from the database.
func MetricRepairs(ctx context.Context, c *http.Client, metricsURL string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", metricsURL, resp.StatusCode)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, name := range RepairMetrics {
			if line != name && !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err != nil || v != 0 {
				out = append(out, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	return out, nil
}
