package compare

import (
	"testing"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/voucher"
)

func TestStoppedBy(t *testing.T) {
	tests := []struct {
		name string
		p    PathResult
		want string
	}{
		{"a failure above the max", PathResult{MaxRate: 2250, Steps: []StepResult{
			{Rate: 1000, Sustained: true}, {Rate: 1500, Sustained: true}, {Rate: 2250, Sustained: true},
			{Rate: 3375, Why: "p99 200ms > 100ms"}, {Rate: 3375, Why: "p99 150ms > 100ms"},
		}}, "3375/s: p99 150ms > 100ms"},
		{"a recheck passed, then max steps", PathResult{MaxRate: 1500, Steps: []StepResult{
			{Rate: 1000, Sustained: true}, {Rate: 1500, Why: "stall"}, {Rate: 1500, Sustained: true},
		}}, "max steps"},
		{"down, then up below the failure", PathResult{MaxRate: 750, Steps: []StepResult{
			{Rate: 1000, Why: "errors 5% > 1%"}, {Rate: 500, Sustained: true}, {Rate: 750, Sustained: true},
		}}, "1000/s: errors 5% > 1%"},
		{"nothing sustained", PathResult{Steps: []StepResult{{Rate: 100, Why: "p99"}, {Rate: 50, Why: "p99 again"}}},
			"50/s: p99 again"},
	}
	for _, tt := range tests {
		if got := tt.p.stoppedBy(); got != tt.want {
			t.Errorf("%s: stoppedBy() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestSaleCommitsTargetAtItsRate: the sale's commits are judged against the
// 0.1-per-admitted target only when it was sent at the target's rate.
func TestSaleCommitsTargetAtItsRate(t *testing.T) {
	for _, tt := range []struct {
		rate  float64
		judge bool
	}{{5_000, false}, {commitsTargetRate, true}} {
		r := &Report{Sale: &verify.Summary{Stock: 1000, RequestedRate: tt.rate, AdmittedOrders: 1000,
			Commits: &verify.Commits{Delta: 80, PerAdmitted: 0.08}}}
		r.finish(Config{})
		judged := 0
		for _, tg := range r.Targets {
			if tg.Name == "<= 0.1 commits per admitted (1000-use burst at 20000/s)" && tg.Pass {
				judged++
			}
		}
		if want := map[bool]int{false: 0, true: 1}[tt.judge]; judged != want {
			t.Errorf("sale at %.0f/s: %d commits targets, want %d (%v)", tt.rate, judged, want, r.Targets)
		}
	}
}

// TestShapeFlashLog: the flash-log path's bursts sell a flash voucher with
// writePath log; flash's keep the default.
func TestShapeFlashLog(t *testing.T) {
	c := &comparer{}
	if got := c.shape(pathFlashLog, 1000, time.Second); !got.Flash || got.WritePath != voucher.WritePathLog {
		t.Errorf("shape(%s) = Flash %v, WritePath %q, want true, %q", pathFlashLog, got.Flash, got.WritePath, voucher.WritePathLog)
	}
	if got := c.shape(pathFlash, 1000, time.Second); !got.Flash || got.WritePath != "" {
		t.Errorf("shape(%s) = Flash %v, WritePath %q, want true, \"\"", pathFlash, got.Flash, got.WritePath)
	}
	if _, ok := wrkPaths[pathFlashLog]; !ok || pathNotes[pathFlashLog] == "" {
		t.Errorf("flash-log has no wrk path or no note")
	}
}
