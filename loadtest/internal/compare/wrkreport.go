package compare

import (
	"fmt"
	"io"
	"strings"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

// Markdown writes the wrk table: each path's best flat-out rate, its p99
// there, its rate and p99 when held to about 80% of it, and its ratio to the
// ceiling measured in the same run.
func (r *WrkReport) Markdown(w io.Writer, durable bool) {
	pg := "fsync off"
	if durable {
		pg = "durable: fsync and full_page_writes on"
	}
	fmt.Fprintf(w, "Generator: wrk, one thread, %d connections, %.0f s per run, best of %d rounds taken in turns; Postgres %s.\n\n",
		r.Conns, r.Seconds, r.Rounds, pg)
	fmt.Fprintln(w, "| path | req/s (max) | p99 at max | ratio to ceiling | req/s at ~80% | p99 at ~80% | non-2xx / socket errors / 503s |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, p := range r.Paths {
		at80, p99 := "-", "-"
		if a := p.At80; a != nil {
			at80, p99 = fmt.Sprintf("%.0f", a.Rate), fmt.Sprintf("%.1f ms", a.P99Ms)
		}
		fmt.Fprintf(w, "| %s | %.0f | %.1f ms | %.2f | %s | %s | %d / %d / %d |\n", p.Name, p.Max.Rate, p.Max.P99Ms, p.Ratio,
			at80, p99, p.Max.Non2xx, p.Max.SocketErrs, p.Faults)
	}
	var rows []cpuRow
	for _, p := range r.Paths {
		rows = append(rows, cpuRow{p.Name, p.CPUPerRequestUs, p.CPURatio, p.GateBatch})
	}
	writeCPUTable(w, rows, fmt.Sprintf("wrk flat out, over the %d rounds; loadtest is the in-process Kafka broker", r.Rounds))
	fmt.Fprintln(w)
	for _, p := range r.Paths {
		fmt.Fprintf(w, "- %s: %s\n", p.Name, p.Note)
	}
	if s := r.Sale; s != nil && s.Commits != nil {
		fmt.Fprintf(w, "\nThe 1,000-use sale sent by wrk at %.0f/s: %d admitted, %d Postgres commits = %.3f per admitted reservation.\n",
			s.Rate, s.Admitted, s.Commits.Delta, s.Commits.PerAdmitted)
	}
	r.writePaths(w, durable)
}

// writePaths sets flash-log beside flash: the rates, what the consumer
// behind the log did, and what a 201 promises on each path.
func (r *WrkReport) writePaths(w io.Writer, durable bool) {
	logPath := r.path(pathFlashLog)
	if logPath == nil {
		return
	}
	fmt.Fprintln(w)
	if f := r.path(pathFlash); f != nil && f.Max.Rate > 0 {
		fmt.Fprintf(w, "flash-log against flash: %.2f x the rate (%.0f/s vs %.0f/s), p99 at ~80%% %s vs %s.\n",
			logPath.Max.Rate/f.Max.Rate, logPath.Max.Rate, f.Max.Rate, at80P99(logPath), at80P99(f))
	}
	if logPath.Drain > 0 {
		fmt.Fprintf(w, "After each flash-log run, Postgres held every 201 at most %.2f s after the last answer.\n", logPath.Drain)
	}
	if s := r.LogSale; s != nil {
		fmt.Fprintf(w, "\nThe %s\n", strings.TrimPrefix(s.line(), "the "))
	}
	pg := "fsync off here: it survives the ledger's crash, not the machine's"
	if durable {
		pg = "durable here: fsync on"
	}
	fmt.Fprintf(w, "\nWhat a 201 promises: flash (sync): the order's row is committed in Postgres (%s). "+
		"flash-log: the admission is in Kafka, acknowledged by every in-sync replica (here kfake: one broker in the loadtest's memory, "+
		"no replica, no disk), and its row comes when the consumer writes it; until then GET, confirm, release and refund wait for it (up to 3 s, then 503).\n", pg)
	fmt.Fprintln(w, "What an operator of flash-log watches: flashgate_admissions_lag_records and _lag_seconds (orders answered but not yet in Postgres), "+
		"flashgate_admissions_dead_letter_total and GET /admin/admissions/failed (admissions the database refused after their 201: "+
		"replay or discard), flashgate_admissions_write_faults_total, and the topic's retention against the longest consumer outage.")
}

// at80P99 is a path's p99 at about 80% of its maximum, or "-".
func at80P99(p *WrkPathResult) string {
	if p.At80 == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", p.At80.P99Ms)
}

// wrkTargets are the targets on the wrk table.
func (r *Report) wrkTargets() {
	if r.Wrk == nil {
		return
	}
	ratio := func(name string, want float64) {
		p := r.Wrk.path(name)
		if p == nil || p.Ratio == 0 {
			return
		}
		got := fmt.Sprintf("%.2f x ceiling (%.0f/s)", p.Ratio, p.Max.Rate)
		pass := p.Ratio >= want
		if a := p.At80; a != nil {
			got += fmt.Sprintf(", p99 %.1f ms at %.0f/s", a.P99Ms, a.Rate)
			pass = pass && a.P99Ms < 25
		}
		r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("wrk: %s >= %.2f x ceiling, p99 < 25 ms at ~80%%", name, want), Got: got, Pass: pass})
	}
	ratio(pathSoldOut, 0.90)
	ratio(pathGate, 0.75)
	ratio(pathFlash, 0.30)
	ratio(pathFlashLog, 0.30)
	cpu := func(name string, most float64) {
		p := r.Wrk.path(name)
		if p == nil || p.CPURatio == 0 {
			return
		}
		r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("cpu: %s <= %.2f x the ceiling's CPU per request", name, most),
			Pass: p.CPURatio <= most, Got: fmt.Sprintf("%.2f x (%.0f us vs %.0f us)", p.CPURatio,
				p.CPUPerRequestUs[load.AllProcs], p.CPUPerRequestUs[load.AllProcs]/p.CPURatio)})
	}
	cpu(pathSoldOut, 1.05)
	cpu(pathGate, 1.2)
	cpu(pathFlash, 3.3)
	cpu(pathFlashLog, 3.5)
	if f, s := r.Wrk.path(pathFlash), r.Wrk.path(pathSolution1); f != nil && s != nil && s.Max.Rate > 0 {
		got := f.Max.Rate / s.Max.Rate
		pg := "fsync off"
		if r.Durable {
			pg = "durable"
		}
		r.Targets = append(r.Targets, Target{Name: "wrk: admitted-and-written >= 10 x solution1 (" + pg + ")", Pass: got >= 10,
			Got: fmt.Sprintf("%.1f x (%.0f/s vs %.0f/s)", got, f.Max.Rate, s.Max.Rate)})
	}
	if s := r.Wrk.Sale; s != nil && s.Commits != nil {
		r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("wrk: <= 0.1 commits per admitted at %.0f/s", s.Rate),
			Pass: s.Commits.PerAdmitted <= 0.1,
			Got:  fmt.Sprintf("%.3f (%d commits / %d admitted)", s.Commits.PerAdmitted, s.Commits.Delta, s.Admitted)})
	}
}
