package compare

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
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

// TestCPUPerRequestReported: the CPU each process used over a path's
// flat-out runs becomes its CPU per request, with their sum and that sum's
// ratio to the ceiling's, in compare.json and in the printed table.
func TestCPUPerRequestReported(t *testing.T) {
	ceil, flash := &WrkPathResult{Name: pathCeiling}, &WrkPathResult{Name: pathFlash}
	ceil.cpu.add(map[string]time.Duration{pathCeiling: 300 * time.Millisecond, wrkProc: 100 * time.Millisecond}, 10_000)
	flash.cpu.add(map[string]time.Duration{"proxy": 500 * time.Millisecond, "postgres": 400 * time.Millisecond,
		"redis": 100 * time.Millisecond, wrkProc: 200 * time.Millisecond}, 5_000)
	flash.cpu.add(map[string]time.Duration{"proxy": 500 * time.Millisecond, wrkProc: 100 * time.Millisecond}, 5_000)
	flash.gateClaims, flash.gateCalls = 10_000, 800
	rep := &Report{Wrk: &WrkReport{Paths: []*WrkPathResult{ceil, flash}}}
	rep.Wrk.cpuFigures()

	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Wrk struct {
			Paths []struct {
				Name            string             `json:"name"`
				CPUPerRequestUs map[string]float64 `json:"cpuPerRequestUs"`
				CPURatio        float64            `json:"cpuRatio"`
			} `json:"paths"`
		} `json:"wrk"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		all, ratio float64
		by         map[string]float64
	}{
		pathCeiling: {40, 1, map[string]float64{pathCeiling: 30, wrkProc: 10}},
		pathFlash:   {180, 4.5, map[string]float64{"proxy": 100, "postgres": 40, "redis": 10, wrkProc: 30}},
	}
	for _, p := range got.Wrk.Paths {
		w := want[p.Name]
		if p.CPUPerRequestUs["all"] != w.all || p.CPURatio != w.ratio {
			t.Errorf("%s: cpuPerRequestUs.all %v, cpuRatio %v, want %v, %v", p.Name, p.CPUPerRequestUs["all"], p.CPURatio, w.all, w.ratio)
		}
		for name, us := range w.by {
			if p.CPUPerRequestUs[name] != us {
				t.Errorf("%s: cpuPerRequestUs[%s] = %v, want %v", p.Name, name, p.CPUPerRequestUs[name], us)
			}
		}
	}
	rep.wrkTargets()
	if len(rep.Targets) != 1 || rep.Targets[0].Pass || rep.Targets[0].Got != "4.50 x (180 us vs 40 us)" {
		t.Errorf("targets = %+v, want flash's CPU target missed at 4.50 x (180 us vs 40 us)", rep.Targets)
	}
	var md strings.Builder
	rep.Wrk.Markdown(&md, false)
	for _, line := range []string{"| path | ceiling | proxy | postgres | redis | wrk | all | x the ceiling | claims per script call |",
		"| ceiling | 30 | - | - | - | 10 | 40 | 1.00 | - |", "| flash | - | 100 | 40 | 10 | 30 | 180 | 4.50 | 12.5 |"} {
		if !strings.Contains(md.String(), line) {
			t.Errorf("the table lacks %q:\n%s", line, md.String())
		}
	}
}

// TestCPUPerRequestVegeta: with vegeta, a path's CPU per request is its
// step's at the maximum, and its ratio the ceiling's in the same run.
func TestCPUPerRequestVegeta(t *testing.T) {
	at := func(us map[string]float64) *StepResult { return &StepResult{CPU: &load.CPUUse{PerRequestUs: us}} }
	ceil := &PathResult{Name: pathCeiling, AtMax: at(map[string]float64{pathCeiling: 30, "loadtest": 70, "all": 100})}
	gate := &PathResult{Name: pathGate, AtMax: at(map[string]float64{"proxy": 60, "redis": 10, "loadtest": 80, "all": 150})}
	none := &PathResult{Name: pathFlash}
	r := &Report{Paths: []*PathResult{ceil, gate, none}}
	r.finish(Config{})
	if gate.CPUPerRequestUs["all"] != 150 || gate.CPURatio != 1.5 || ceil.CPURatio != 1 {
		t.Errorf("flash-gate: cpuPerRequestUs %v, cpuRatio %v (ceiling %v), want all 150, 1.5 (1)", gate.CPUPerRequestUs, gate.CPURatio, ceil.CPURatio)
	}
	if none.CPUPerRequestUs != nil || none.CPURatio != 0 {
		t.Errorf("a path without a maximum: %v, %v, want none", none.CPUPerRequestUs, none.CPURatio)
	}
}
