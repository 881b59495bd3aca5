package attack

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// Every attack of #25, short (the same wants with smaller counts: junk a
// sale at 1,000/s in two 1 s rounds alone and two beside 16 flat-out junk
// clients; bot 2,000
// reserves at 1,000/s from one address with 20 real customers beside it;
// hammer two groups of 800 orders at 400/s on 500 uses; creds and csv
// whole), through the same code as `loadtest attack --short`, each on a
// stack of its own: real Redis, Postgres, ledger and proxy processes. Every
// want must pass (about a minute and a half).
func TestAttacks(t *testing.T) {
	load.RaiseOpenFiles()
	cfg := Config{Short: true, ServiceLog: io.Discard,
		BinDir: devstacktest.Binaries(t, "../../../ledger", "../../../proxy")}
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			res, err := sc.Run(context.Background(), cfg)
			if err != nil {
				t.Fatalf("%s: %v", sc.Name, err)
			}
			var out strings.Builder
			PrintResult(&out, res)
			t.Logf("%s:\n%s", sc.Name, out.String())
			for _, c := range res.Checks {
				if !c.Pass {
					t.Errorf("%s: want %s: %s", sc.Name, c.Name, c.Detail)
				}
			}
			if len(res.Checks) == 0 {
				t.Errorf("%s judged no want", sc.Name)
			}
		})
	}
}

// metricSum adds the samples of one metric whose labels match, and no other
// metric's that shares its prefix.
func TestMetricSum(t *testing.T) {
	page := `# HELP flashgate_http_request_duration_seconds x
flashgate_http_request_duration_seconds_count{code="404",method="GET",route="/admin/vouchers/:code",service="ledger"} 7
flashgate_http_request_duration_seconds_count{code="200",method="GET",route="/admin/vouchers/:code",service="ledger"} 3
flashgate_http_request_duration_seconds_count{code="404",method="GET",route="/internal/vouchers/:code",service="ledger"} 2
flashgate_http_request_duration_seconds_count{code="404",method="POST",route="/admin/vouchers/:code",service="ledger"} 100
flashgate_http_request_duration_seconds_count{code="404",method="GET",route="/vouchers/:code/reservations/:orderId",service="ledger"} 50
flashgate_http_request_duration_seconds_count{code="404",method="GET",route="/internal/vouchers/:code/terms",service="ledger"} 1
flashgate_ledger_write_batch_size_count 12
flashgate_ledger_write_batch_size_count_other 99
`
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{writeBatches, nil, 12},
		{httpRequests, []string{`method="GET"`}, 63},
		{httpRequests, []string{`code="404"`, `method="GET"`, `route="/admin/vouchers/:code"`}, 7},
	} {
		if got := metricSum(page, tc.name, tc.labels...); got != tc.want {
			t.Errorf("metricSum(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if got := codeLookups(page); got != 10 {
		t.Errorf("codeLookups = %v, want 10", got)
	}
}

// pickScenarios takes names, "all" or nothing, and refuses an unknown name.
func TestPickScenarios(t *testing.T) {
	all, err := pickScenarios(nil)
	if err != nil || len(all) != len(Scenarios()) {
		t.Fatalf("pickScenarios(nil) = %d scenarios, %v; want every one", len(all), err)
	}
	two, err := pickScenarios([]string{"bot", "csv"})
	if err != nil || len(two) != 2 || two[0].Name != "bot" || two[1].Name != "csv" {
		t.Errorf("pickScenarios(bot, csv) = %v, %v", two, err)
	}
	if _, err := pickScenarios([]string{"nope"}); err == nil {
		t.Error("pickScenarios(nope): no error, want one")
	}
}
