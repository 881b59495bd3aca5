package verify

import (
	"bytes"
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
