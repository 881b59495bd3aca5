package load

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Procs names the processes a run started, each by the pid of its root: the
// proxy, the ledger, redis-server, the postmaster. A name counts its root and
// every process below it that is not itself a root (Postgres's backends count
// as postgres), found by parent pid, never by command name, so that whatever
// else runs on the machine is not counted. This process's own pid counts this
// process alone: the processes it started are the others' roots.
type Procs map[string]int

// ProcTimes is the CPU time (user + system) each named process tree had used
// at one moment, in clock ticks.
type ProcTimes struct {
	at    time.Time
	ticks map[string]uint64
}

// procStat is what ReadProcTimes needs of /proc/<pid>/stat.
type procStat struct {
	ppid int
	own  uint64 // utime + stime
	dead uint64 // cutime + cstime: the children it reaped
}

// ReadProcTimes reads the CPU time of each of roots' trees now. A process
// counts its own time and that of the children it has reaped, so a Postgres
// backend that exits between two readings still counts, in the postmaster's
// figure; what is lost is a process whose parent exits before reaping it (the
// orphan leaves the tree), which none of the stack's servers do while serving.
// A root that is not running reads 0.
func ReadProcTimes(roots Procs) ProcTimes {
	t := ProcTimes{at: time.Now(), ticks: map[string]uint64{}}
	stats := readStats()
	byPid := map[int]string{}
	for name, pid := range roots {
		if pid > 0 {
			byPid[pid] = name
			t.ticks[name] = 0
		}
	}
	self := os.Getpid()
	for pid, st := range stats {
		name, root, ok := rootOf(pid, stats, byPid)
		switch {
		case !ok, root == self && pid != self:
			continue // not the run's, or started by this process outside every root
		case pid == self:
			t.ticks[name] += st.own // its reaped children are other roots or the generator
		default:
			t.ticks[name] += st.own + st.dead
		}
	}
	return t
}

// rootOf walks from pid up its parents to the first root.
func rootOf(pid int, stats map[int]procStat, byPid map[int]string) (string, int, bool) {
	for p, hops := pid, 0; p > 1 && hops < 64; hops++ {
		if name, ok := byPid[p]; ok {
			return name, p, true
		}
		st, ok := stats[p]
		if !ok {
			return "", 0, false
		}
		p = st.ppid
	}
	return "", 0, false
}

// readStats reads /proc/*/stat: every process's parent and CPU times.
func readStats() map[int]procStat {
	out := map[int]procStat{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out[pid] = st
		}
	}
	return out
}

// readStat parses /proc/<pid>/stat. The command is in parentheses and may
// hold spaces or ')', so fields are counted after the last ')': state, ppid,
// ..., utime and stime (the 12th and 13th after it), cutime and cstime.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false // gone meanwhile
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procStat{}, false
	}
	n := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
	ppid, _ := strconv.Atoi(f[1])
	return procStat{ppid: ppid, own: n(f[11]) + n(f[12]), dead: n(f[13]) + n(f[14])}, true
}

// Since is the CPU time each name used from a to t. A name read in t but not
// in a (a root started in between) counts from 0; a restarted root's figure
// would go back, and counts 0.
func (t ProcTimes) Since(a ProcTimes) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, b := range t.ticks {
		var d time.Duration
		if b > a.ticks[name] {
			d = time.Duration(b-a.ticks[name]) * clockTick
		}
		out[name] = d
	}
	return out
}

// Wall is the time from a to t.
func (t ProcTimes) Wall(a ProcTimes) time.Duration { return t.at.Sub(a.at) }

// AllProcs is the key of PerRequestMicros' total.
const AllProcs = "all"

// PerRequestMicros is each name's CPU time per request in microseconds, n
// requests, with the sum under AllProcs; nil when n is 0.
func PerRequestMicros(used map[string]time.Duration, n int64) map[string]float64 {
	if n <= 0 {
		return nil
	}
	out := map[string]float64{}
	var all time.Duration
	for name, d := range used {
		out[name] = float64(d.Microseconds()) / float64(n)
		all += d
	}
	out[AllProcs] = float64(all.Microseconds()) / float64(n)
	return out
}

// ProcNames is the names of per-request figures in a report's order: those in
// order first, then the rest sorted, AllProcs last.
func ProcNames(figures []map[string]float64, order ...string) []string {
	seen := map[string]bool{AllProcs: true}
	var rest []string
	for _, f := range figures {
		for name := range f {
			if !seen[name] && !slices.Contains(order, name) {
				seen[name] = true
				rest = append(rest, name)
			}
		}
	}
	slices.Sort(rest)
	var out []string
	for _, name := range order {
		for _, f := range figures {
			if _, ok := f[name]; ok {
				out = append(out, name)
				break
			}
		}
	}
	return append(append(out, rest...), AllProcs)
}

// SelfProc is the name this process goes by in Procs: the load generator
// (vegeta), and on a log voucher's path the in-process Kafka broker (kfake).
const SelfProc = "loadtest"

// WithSelf is procs (a stack's, by name) and this process as SelfProc.
func WithSelf(procs map[string]int) Procs {
	out := Procs{SelfProc: os.Getpid()}
	for name, pid := range procs {
		out[name] = pid
	}
	return out
}

// ByProcess is PerRequestUs as a report line, "proxy 41, redis 6.5, ...,
// all 61 us of CPU per request", or "" when not measured.
func (u *CPUUse) ByProcess() string {
	if u == nil || u.PerRequestUs == nil {
		return ""
	}
	var parts []string
	for _, name := range ProcNames([]map[string]float64{u.PerRequestUs}, ReportOrder...) {
		parts = append(parts, name+" "+MicrosString(u.PerRequestUs[name]))
	}
	return strings.Join(parts, ", ") + " us of CPU per request"
}

// ReportOrder is the order reports list processes in: the edge first, the
// generator last (ProcNames puts any other name after these).
var ReportOrder = []string{"ceiling", "proxy", "ledger", "postgres", "redis", SelfProc, "wrk"}

// MicrosString is a figure in microseconds with a decimal below 10: "6.5", "41".
func MicrosString(us float64) string {
	if us < 10 {
		return strconv.FormatFloat(us, 'f', 1, 64)
	}
	return strconv.FormatFloat(us, 'f', 0, 64)
}
