package ops

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricNames checks that every flashgate_* metric the alerts and the
// dashboard query is in docs/operations.md's metrics table, and that the table gives
// each name one row: one meaning per name (issue 16 renamed the ledger's
// flashgate_voucher_remaining, which meant something else than the proxy's).
func TestMetricNames(t *testing.T) {
	readme, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	rows := map[string]int{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(flashgate_[a-z_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		rows[m[1]]++
	}
	require.NotEmpty(t, rows)
	for name, n := range rows {
		assert.Equal(t, 1, n, "%s has %d rows in the metrics table of docs/operations.md: one name, one meaning", name, n)
	}
	for _, f := range []string{"alerts.yml", "grafana-dashboard.json"} {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, name := range regexp.MustCompile(`flashgate_[a-z_]+`).FindAllString(string(raw), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				base = strings.TrimSuffix(base, suffix)
			}
			assert.Contains(t, rows, base, "%s queries %s, which docs/operations.md does not document", f, name)
		}
	}
}
