package compare

import (
	"strings"
	"testing"
	"time"
)

func TestParseLag(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		want   Lag
		wantOK bool
	}{
		{"two partitions", `# HELP flashgate_admissions_lag_records Admission records of a partition not written yet.
# TYPE flashgate_admissions_lag_records gauge
flashgate_admissions_lag_records{partition="0"} 1200
flashgate_admissions_lag_records{partition="3"} 34
# TYPE flashgate_admissions_lag_seconds gauge
flashgate_admissions_lag_seconds{partition="0"} 0.75
flashgate_admissions_lag_seconds{partition="3"} 1.5e-02
flashgate_admissions_consumed_total 5000
flashgate_admissions_lag_recordsx{partition="1"} 99
`, Lag{Records: 1234, Seconds: 0.75}, true},
		{"caught up", "flashgate_admissions_lag_records{partition=\"2\"} 0\nflashgate_admissions_lag_seconds{partition=\"2\"} 0\n", Lag{}, true},
		{"no consumer yet", "flashgate_http_requests_total 3\n", Lag{}, false},
	}
	for _, tt := range tests {
		got, ok := parseLag(strings.NewReader(tt.text))
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: parseLag() = %+v, %v, want %+v, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestLogSaleDuration(t *testing.T) {
	tests := []struct {
		stock int
		rate  float64
		want  time.Duration
	}{
		{50_000, 10_000, 9 * time.Second},
		{50_000, 0, 30 * time.Second},
		{50_000, 100_000, 5 * time.Second},
		{50_000, 500, 60 * time.Second},
	}
	for _, tt := range tests {
		if got := logSaleDuration(tt.stock, tt.rate); got != tt.want {
			t.Errorf("logSaleDuration(%d, %.0f) = %s, want %s", tt.stock, tt.rate, got, tt.want)
		}
	}
}

// TestWrkReportFlashLog: the flash-log row stands beside flash, and the report
// says what the consumer did and what a 201 promises on each path.
func TestWrkReportFlashLog(t *testing.T) {
	w := &WrkReport{Conns: 64, Seconds: 5, Rounds: 2, Paths: []*WrkPathResult{
		{Name: pathCeiling, Max: WrkRun{Rate: 40_000}},
		{Name: pathFlash, Max: WrkRun{Rate: 6_000}, At80: &WrkRun{Rate: 4_800, P99Ms: 30}},
		{Name: pathFlashLog, Max: WrkRun{Rate: 13_000}, At80: &WrkRun{Rate: 10_400, P99Ms: 12}, Drain: 0.4},
	}, LogSale: &WrkLogSale{Stock: 50_000, Connections: 64, Seconds: 7, Rate: 12_000, P99Ms: 20, Admitted: 50_000,
		RedisHeld: 50_000, Used: 50_000, MaxLag: Lag{Records: 3000, Seconds: 0.5}, LagAtEnd: Lag{Records: 800, Seconds: 0.2},
		ToPostgres: 0.35, LagReadable: true}}
	r := &Report{Wrk: w}
	for _, p := range w.Paths {
		p.Ratio = p.Max.Rate / 40_000
	}
	r.wrkTargets()
	var md strings.Builder
	w.Markdown(&md, false)
	out := md.String()
	for _, want := range []string{
		"| flash-log | 13000 | 0.0 ms | 0.33 | 10400 | 12.0 ms |",
		"flash-log against flash: 2.17 x the rate (13000/s vs 6000/s), p99 at ~80% 12.0 ms vs 30.0 ms.",
		"After each flash-log run, Postgres held every 201 at most 0.40 s after the last answer.",
		"The 50000-use flash-log sale, wrk flat out (64 connections, 7 s): 50000 answered 201 (12000 answers/s, p99 20.0 ms); " +
			"the consumer's lag at most 3000 records / 0.50 s while it ran and was written, 800 records / 0.20 s at the last answer, " +
			"0 records / 0.00 s once written; Postgres held every 201 0.35 s after the last answer (used_count 50000, Redis held 50000).",
		"What a 201 promises: flash (sync): the order's row is committed in Postgres (fsync off here",
		"flash-log: the admission is in Kafka, acknowledged by every in-sync replica",
		"flashgate_admissions_lag_records",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown() lacks %q in:\n%s", want, out)
		}
	}
	var got *Target
	for i := range r.Targets {
		if strings.Contains(r.Targets[i].Name, "flash-log") {
			got = &r.Targets[i]
		}
	}
	if got == nil || !got.Pass || got.Got != "0.33 x ceiling (13000/s), p99 12.0 ms at 10400/s" {
		t.Errorf("flash-log target = %+v, want met: 0.33 x ceiling (13000/s), p99 12.0 ms at 10400/s", got)
	}
}

// TestWrkReportWithoutFlashLog: a run without flash-log says nothing of it.
func TestWrkReportWithoutFlashLog(t *testing.T) {
	w := &WrkReport{Paths: []*WrkPathResult{{Name: pathFlash, Max: WrkRun{Rate: 6_000}}}}
	var md strings.Builder
	w.Markdown(&md, false)
	if strings.Contains(md.String(), "flash-log") || strings.Contains(md.String(), "What a 201 promises") {
		t.Errorf("Markdown() without flash-log mentions it:\n%s", md.String())
	}
}
