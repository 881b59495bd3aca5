package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/flashgate/flashgate/loadtest/internal/verify"
)

// soakMarkdown is the soak's part of chaos.md: a line per round, then the
// instances' RSS and goroutines over time.
func soakMarkdown(r *Result) string {
	var b strings.Builder
	b.WriteString("\n### Rounds\n\n| round | fault | fault at | lasted | requests | 201 | 409 | 503 | errors | p99 | 503 p99 in fault | invariants | reserves answered again | Redis = DB | verdict |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n")
	for i, rr := range r.Rounds {
		fmt.Fprintf(&b, "| %d | %s | %.0f s | %.1f s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s |\n",
			i+1, rr.Scenario, rr.FaultAt, rr.FaultSeconds, rr.Requests, rr.Created, rr.Refused, rr.Unavailable, rr.Errors,
			p99Of(rr), p99Of503(rr), invariantsVerdict(rr), seconds(rr.RecoverySeconds), seconds(rr.SettleSeconds), verify.Verdict(rr.Pass))
	}
	for i, rr := range r.Rounds {
		if rr.Pass {
			continue
		}
		fmt.Fprintf(&b, "\nRound %d (%s) failed:\n\n", i+1, rr.Scenario)
		if rr.Error != "" {
			fmt.Fprintf(&b, "- ERROR %s\n", rr.Error)
		}
		for _, c := range rr.Checks {
			if !c.Pass {
				fmt.Fprintf(&b, "- FAIL %s: %s\n", c.Name, c.Detail)
			}
		}
	}
	b.WriteString("\n### RSS (MB) and goroutines over time\n\n")
	writeSampleTable(&b, r.Samples)
	return b.String()
}

// p99Of is the p99 of every answer, or "-".
func p99Of(r *Result) string {
	if r.Latency == nil {
		return "-"
	}
	return fmt.Sprintf("%.0fms", r.Latency.P99)
}

// writeSampleTable writes one row per sampling round: each instance's RSS and
// goroutines ("-": it did not answer, killed or restarting).
func writeSampleTable(w io.Writer, samples []ProcSample) {
	var names []string
	for _, s := range samples {
		if !slices.Contains(names, s.Instance) {
			names = append(names, s.Instance)
		}
	}
	slices.Sort(names)
	fmt.Fprintf(w, "| s |")
	for _, n := range names {
		fmt.Fprintf(w, " %s RSS | %s goroutines (connections) |", n, n)
	}
	fmt.Fprintf(w, "\n| ---: |%s\n", strings.Repeat(" ---: | ---: |", len(names)))
	for _, row := range sampleRows(samples) {
		fmt.Fprintf(w, "| %.0f |", row[0].At)
		for _, n := range names {
			i := slices.IndexFunc(row, func(s ProcSample) bool { return s.Instance == n })
			if i < 0 {
				fmt.Fprint(w, " - | - |")
				continue
			}
			fmt.Fprintf(w, " %.0f | %d (%d) |", row[i].RSSMB, row[i].Goroutines, row[i].Conns)
		}
		fmt.Fprintln(w)
	}
}

// sampleRows groups samples taken in one sampling round (within a second).
func sampleRows(samples []ProcSample) [][]ProcSample {
	var rows [][]ProcSample
	for _, s := range samples {
		if n := len(rows); n > 0 && s.At-rows[n-1][0].At < 1 {
			rows[n-1] = append(rows[n-1], s)
			continue
		}
		rows = append(rows, []ProcSample{s})
	}
	return rows
}
