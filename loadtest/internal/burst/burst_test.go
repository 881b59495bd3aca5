package burst

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// buildServices builds bin/ledger and bin/proxy from this tree, once per test
// binary, into a temp dir.
func buildServices(tb testing.TB) string {
	tb.Helper()
	return devstacktest.Binaries(tb, "../../../ledger", "../../../proxy")
}

// Short bursts through the same code as `loadtest burst`, against a real
// ledger and proxy on real Redis and Postgres: every invariant must hold.
func TestBurstInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	// The reconciler off (issue 22): each flash burst ends with agreement and
	// no repair by the ledger.
	st, err := stack.Start(stack.Options{BinDir: buildServices(t), Token: "test-token",
		ExternalDB: devstacktest.PostgresURL(t), ExternalRDB: devstacktest.RedisURL(t),
		LedgerEnv: []string{"RECONCILE_INTERVAL=1h"}, ServiceLog: devstacktest.ServiceLog(t, "services")})
	require.NoError(t, err)
	t.Cleanup(st.Stop)
	rdb, db := agreementClients(t, st)
	b, err := verify.OpenBench(t.Context(), st.Endpoints())
	require.NoError(t, err)
	t.Cleanup(b.Close)

	tests := []Config{
		// The sale: demand far above 1,000 uses, 10% retries.
		{Label: "flash", Rate: 2000, Duration: 2500 * time.Millisecond, Stock: 1000, PerUser: 1,
			Customers: 3000, Retry: 0.10, Flash: true, Seed: 1},
		// Every customer orders 9 times against a limit of 2: demand 200 < stock 300.
		{Label: "peruser", Rate: 1000, Duration: time.Second, Stock: 300, PerUser: 2,
			Customers: 100, Retry: 0.10, Flash: true, Seed: 2},
		// A standard voucher: the ledger's guarded UPDATE, no Redis.
		{Label: "standard", Rate: 300, Duration: time.Second, Stock: 100, PerUser: 1,
			Customers: 1000, Retry: 0.10, Flash: false, Seed: 3},
	}
	for _, cfg := range tests {
		t.Run(cfg.Label, func(t *testing.T) {
			cfg.Attack = load.DefaultAttack
			s, err := Send(t.Context(), b, cfg)
			require.NoError(t, err)
			require.Equal(t, cfg.Requests(), s.Answered, "answers")
			require.NotEmpty(t, s.Checks)
			for _, c := range s.Checks {
				assert.True(t, c.Pass, "%s: %s", c.Name, c.Detail)
			}
			// With failed requests the counts are checked as bounds; many
			// failures would make those bounds say nothing.
			assert.LessOrEqual(t, s.ErrorRate, 0.01, "failed requests: %v", s.ErrorSamples)
			if cfg.Flash {
				agreementtest.RequireAgreement(t, rdb, db, s.Code)
				agreementtest.RequireNoRepairMetrics(t, st.LedgerURL+"/metrics")
				agreementtest.RequireNoRepairAudited(t, db, s.Code)
			}
			assert.Equal(t, min(cfg.Stock, s.Demand), s.Expected)
			t.Logf("%s: %d requests at %.0f/s (achieved %.0f/s): %v; p99 %.1fms; %d admitted",
				cfg.Label, s.Requests, s.RequestedRate, s.AchievedRate, s.Statuses, s.All.P99, s.AdmittedOrders)

			// The report writes and names its files.
			html, js, err := verify.WriteReport(t.TempDir(), s)
			require.NoError(t, err)
			assert.FileExists(t, html)
			assert.FileExists(t, js)
		})
	}
}
