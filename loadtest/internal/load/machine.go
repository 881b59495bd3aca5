package load

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUReading is the machine's CPU time (from /proc/stat, all CPUs) and this
// process's, at one moment. Everything a burst measures shares these CPUs, so a
// report says how busy they were and how much of that was the load generator.
type CPUReading struct {
	busy, total uint64        // machine, clock ticks; 0 when /proc/stat is unreadable
	self        time.Duration // this process, user + system
	children    uint64        // clock ticks of every process started by this one (the stack)
	descendants int           // how many such processes run: none when the stack is another's
	at          time.Time
}

// clockTick is USER_HZ, the unit of /proc times: 100 on every Linux that matters.
const clockTick = 10 * time.Millisecond

// ReadCPU reads the machine's, this process's and its children's CPU time now.
func ReadCPU() CPUReading {
	r := CPUReading{at: time.Now()}
	r.children, r.descendants = descendantTicks(os.Getpid())
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return r
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(fields) < 5 || fields[0] != "cpu" {
		return r
	}
	for i, f := range fields[1:] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return CPUReading{self: r.self, children: r.children, descendants: r.descendants, at: r.at}
		}
		if i >= 8 { // guest time is already counted in user
			break
		}
		r.total += n
		if i != 3 && i != 4 { // idle, iowait
			r.busy += n
		}
	}
	return r
}

// descendantTicks sums the CPU time (user + system, plus that of their reaped
// children) of every process below pid, from /proc/*/stat, and counts them.
func descendantTicks(pid int) (sum uint64, n int) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0
	}
	parent := map[int]int{}
	ticks := map[int]uint64{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ... utime stime cutime cstime: comm may hold
		// spaces and parentheses, so fields are counted after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[p] = ppid
		for _, v := range f[11:15] {
			n, _ := strconv.ParseUint(v, 10, 64)
			ticks[p] += n
		}
	}
	for p, t := range ticks {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				sum += t
				n++
				break
			}
		}
	}
	return sum, n
}

// CPUUse is how the CPUs were used between two readings, in CPUs' worth
// (2.0 = both CPUs of a 2-CPU machine for the whole time).
type CPUUse struct {
	CPUs           int     `json:"cpus"`
	MachineBusy    float64 `json:"machineBusy"`    // share of all CPUs busy, 0..1
	GeneratorCores float64 `json:"generatorCores"` // this process: the load generator
	// GeneratorMicros is the generator's CPU time per request sent, in
	// microseconds (PerRequest sets it): what one request costs the CPUs the
	// stack shares.
	GeneratorMicros float64 `json:"generatorMicrosPerRequest,omitempty"`
	StackCores      float64 `json:"stackCores"` // processes this one started: proxy, ledger, Redis, Postgres, ceiling
	// StackMeasured is false when this process started none (a burst on
	// --target): the stack's CPU is then in OtherCores, and StackCores 0
	// says nothing.
	StackMeasured bool    `json:"stackMeasured"`
	OtherCores    float64 `json:"otherCores"` // everything else on the machine
	LoadAvg       float64 `json:"loadAvg1"`   // 1-minute load average at the start
	// PerRequestUs is, when the run named its processes (Procs), each one's
	// CPU time per request sent in microseconds, and their sum under "all".
	PerRequestUs map[string]float64 `json:"perRequestUs,omitempty"`

	generator time.Duration // this process's CPU time between the readings
}

// PerRequest sets GeneratorMicros for n requests sent between the readings.
func (u *CPUUse) PerRequest(n int) {
	if n > 0 {
		u.GeneratorMicros = float64(u.generator.Microseconds()) / float64(n)
	}
}

// CPUBetween is the CPU use from a to b on cpus CPUs, load the load average at
// the start.
func CPUBetween(a, b CPUReading, cpus int, load float64) *CPUUse {
	u := &CPUUse{CPUs: cpus, LoadAvg: load, StackMeasured: a.descendants > 0 && b.descendants > 0}
	wall := b.at.Sub(a.at)
	if wall <= 0 {
		return u
	}
	if b.total > a.total {
		u.MachineBusy = float64(b.busy-a.busy) / float64(b.total-a.total)
	}
	u.GeneratorCores = float64(b.self-a.self) / float64(wall)
	u.generator = b.self - a.self
	if b.children > a.children {
		u.StackCores = float64(time.Duration(b.children-a.children)*clockTick) / float64(wall)
	}
	u.OtherCores = max(u.MachineBusy*float64(cpus)-u.GeneratorCores-u.StackCores, 0)
	return u
}

// LoadAvg returns the 1-minute load average, or 0.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// openFilesWanted is the descriptor limit a fault run asks for: each request
// in flight through the chaos balancer holds three descriptors in this
// process (the client's connection, and the balancer's two), and a stalled
// stack lets every worker's request pile up at once.
const openFilesWanted = 1 << 16

// RaiseOpenFiles lifts this process's open-file limit to openFilesWanted when
// the system lets it (the hard limit too, for root), as load generators are
// run (wrk's advice: ulimit -n). It returns the limit in force; a refusal
// leaves the limit as it was.
func RaiseOpenFiles() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur >= openFilesWanted {
		return lim.Cur
	}
	want := syscall.Rlimit{Cur: openFilesWanted, Max: max(lim.Max, openFilesWanted)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max} // as far as an unprivileged process may
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) != nil {
			return lim.Cur
		}
	}
	return want.Cur
}

// Stack is the stack's CPUs as a report shows it: "0.85", or "not measured"
// when this process started none of it.
func (u *CPUUse) Stack() string {
	if !u.StackMeasured {
		return "not measured (not started by this process; counted in other processes)"
	}
	return strconv.FormatFloat(u.StackCores, 'f', 2, 64)
}
