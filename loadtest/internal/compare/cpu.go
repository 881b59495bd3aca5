package compare

import (
	"fmt"
	"io"
	"maps"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
)

// CPU per request by process: what each path costs the machine, which does
// not depend on how busy the neighbours are, where a rate does. Each process
// the run started is read from /proc by its process tree (load.Procs): the
// stack's services, Redis, Postgres with its backends, the ceiling and
// solution1 servers, this process (the in-process Kafka broker of flash-log;
// with vegeta, the generator too) and wrk, whose own CPU time its exit
// reports. Every process counts on every path, idle or not: "all" is what the
// machine spent per request while the path ran.

// wrkProc is wrk's name in the figures.
const wrkProc = "wrk"

// runProcs names the processes of this run: the stack's, this one's and the
// servers compare started beside it.
func runProcs(st *stack.Stack, servers map[string]int) func() load.Procs {
	return func() load.Procs {
		procs := load.WithSelf(st.Procs())
		maps.Copy(procs, servers)
		return procs
	}
}

// cpuWindow is the CPU each of the run's processes used over one measured
// run, and the requests answered in it.
type cpuWindow struct {
	used     map[string]time.Duration
	requests int64
}

// add adds the figures of one more run.
func (w *cpuWindow) add(used map[string]time.Duration, requests int64) {
	if w.used == nil {
		w.used = map[string]time.Duration{}
	}
	for name, d := range used {
		w.used[name] += d
	}
	w.requests += requests
}

// perRequest is the window's CPU per request by process, in microseconds.
func (w *cpuWindow) perRequest() map[string]float64 {
	return load.PerRequestMicros(w.used, w.requests)
}

// cpuRatio is all's ratio to the ceiling's all, or 0 when either is missing.
func cpuRatio(us, ceiling map[string]float64) float64 {
	if ceiling[load.AllProcs] <= 0 || us == nil {
		return 0
	}
	return us[load.AllProcs] / ceiling[load.AllProcs]
}

// cpuRow is one path's line of the CPU table.
type cpuRow struct {
	name  string
	us    map[string]float64
	ratio float64
	batch float64 // claims per reserve script call; 0: none
}

// writeCPUTable writes the table of CPU per request by process, one row per
// path, with the ratio of its total to the ceiling's; nothing when no path
// was measured.
func writeCPUTable(w io.Writer, rows []cpuRow, how string) {
	var figures []map[string]float64
	for _, r := range rows {
		if r.us != nil {
			figures = append(figures, r.us)
		}
	}
	if len(figures) == 0 {
		return
	}
	names := load.ProcNames(figures, load.ReportOrder...)
	fmt.Fprintf(w, "\nCPU per request by process, us (%s; from /proc, the processes this run started and their children):\n\n", how)
	fmt.Fprintf(w, "| path | %s | x the ceiling | claims per script call |\n", strings.Join(names, " | "))
	fmt.Fprintf(w, "| --- |%s ---: | ---: |\n", strings.Repeat(" ---: |", len(names)))
	for _, r := range rows {
		if r.us == nil {
			continue
		}
		cells := make([]string, len(names))
		for i, name := range names {
			cells[i] = "-"
			if v, ok := r.us[name]; ok {
				cells[i] = load.MicrosString(v)
			}
		}
		ratio := "-"
		if r.ratio > 0 {
			ratio = fmt.Sprintf("%.2f", r.ratio)
		}
		batch := "-"
		if r.batch > 0 {
			batch = fmt.Sprintf("%.1f", r.batch)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.name, strings.Join(cells, " | "), ratio, batch)
	}
}
