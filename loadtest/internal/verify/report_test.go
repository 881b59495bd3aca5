package verify

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

// The report's plot names 503s apart from other failures, and shows its
// legend above the plot, where the report's frame has room for it.
func TestReportPlotLegend(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var shots []load.Shot
	for i, status := range []uint16{201, 409, 422, 503, 500, 0, 201, 503} {
		shots = append(shots, load.Shot{Seq: uint64(i), Req: int32(i), Status: status,
			At: at.Add(time.Duration(i) * time.Millisecond), Latency: time.Duration(i+1) * time.Millisecond})
	}
	s := &Summary{Label: "demo", Code: "DEMO-1", Shots: shots, Statuses: map[string]int{}, Answered: len(shots), Unavailable: 2}
	j := Judge(s)
	s.Verdict = &j
	var page bytes.Buffer
	if err := renderReport(&page, s); err != nil {
		t.Fatalf("renderReport: %v", err)
	}
	html := page.String()
	for _, want := range []string{"ERROR 503 shed/unavailable", "ERROR 500", "ERROR no answer (transport)", "201 admitted",
		"409 refused", "422 refused", ".uplot .u-legend{order:-1", "were 503 shed/unavailable"} {
		if !strings.Contains(html, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(html, "other error") {
		t.Errorf("report.html still names a series %q", "other error")
	}
}

// A burst that named its processes reports each one's CPU per request, and
// their sum, in report.html, the printed summary and summary.json.
func TestReportCPUByProcess(t *testing.T) {
	cpu := &load.CPUUse{CPUs: 2, PerRequestUs: map[string]float64{"proxy": 41, "redis": 6.5, "loadtest": 13, "all": 60.5}}
	s := &Summary{Label: "demo", Code: "DEMO-2", Statuses: map[string]int{}, CPU: cpu}
	j := Judge(s)
	s.Verdict = &j
	dir := t.TempDir()
	html, js, err := WriteReport(dir, s)
	if err != nil {
		t.Fatalf("WriteReport: %v", err)
	}
	want := "proxy 41, redis 6.5, loadtest 13, all 60 us of CPU per request"
	page, _ := os.ReadFile(html)
	if !strings.Contains(string(page), want) {
		t.Errorf("report.html lacks %q", want)
	}
	var printed bytes.Buffer
	PrintSummary(&printed, s)
	if !strings.Contains(printed.String(), want) {
		t.Errorf("PrintSummary lacks %q:\n%s", want, printed.String())
	}
	raw, _ := os.ReadFile(js)
	var got struct {
		CPU struct {
			PerRequestUs map[string]float64 `json:"perRequestUs"`
		} `json:"cpu"`
	}
	if err := json.Unmarshal(raw, &got); err != nil || got.CPU.PerRequestUs["all"] != 60.5 || got.CPU.PerRequestUs["redis"] != 6.5 {
		t.Errorf("summary.json cpu.perRequestUs = %v (%v), want %v", got.CPU.PerRequestUs, err, cpu.PerRequestUs)
	}
}
