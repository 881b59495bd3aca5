package stack

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CPUSplit gives the system under test and the load generator CPUs of their
// own, as two machines would: every process this one started (the services,
// Redis, Postgres and the children they fork later) runs on the first CPU this
// process may use, and this process, the generator, on the others. On a
// machine where both share every CPU, a generator sending more than the stack
// can take starves the stack and its own clock alike, and what it measures is
// the run queue, not the service. Without two CPUs it splits nothing.
type CPUSplit struct {
	all, stack, gen unix.CPUSet
	pinned          []int // thread ids moved to stack
	Split           bool
}

// SplitCPUs pins as described on CPUSplit; Undo gives every thread it moved
// the whole set back.
func SplitCPUs() (*CPUSplit, error) {
	s := &CPUSplit{}
	if err := unix.SchedGetaffinity(0, &s.all); err != nil {
		return nil, fmt.Errorf("cpu split: %w", err)
	}
	cpus := s.cpus()
	if len(cpus) < 2 {
		return s, nil
	}
	s.stack.Set(cpus[0])
	for _, c := range cpus[1:] {
		s.gen.Set(c)
	}
	self := os.Getpid()
	for _, tid := range threads(self) {
		_ = unix.SchedSetaffinity(tid, &s.gen) // a thread that ended meanwhile
	}
	for _, pid := range descendants(self) {
		for _, tid := range threads(pid) {
			if unix.SchedSetaffinity(tid, &s.stack) == nil {
				s.pinned = append(s.pinned, tid)
			}
		}
	}
	s.Split = true
	return s, nil
}

func (s *CPUSplit) cpus() []int {
	var out []int
	for c := 0; c < 1024 && len(out) < s.all.Count(); c++ {
		if s.all.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// String says how the CPUs were split, for the report.
func (s *CPUSplit) String() string {
	if !s.Split {
		return "one CPU: the generator and the stack share it"
	}
	c := s.cpus()
	return fmt.Sprintf("the stack (%d threads) on CPU %d, the load generator on CPU %s", len(s.pinned), c[0], cpuList(c[1:]))
}

func cpuList(c []int) string {
	parts := make([]string, len(c))
	for i, n := range c {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// Undo gives this process's threads and every process it started (their
// children included) every CPU again.
func (s *CPUSplit) Undo() {
	if !s.Split {
		return
	}
	self := os.Getpid()
	for _, pid := range append([]int{self}, descendants(self)...) {
		for _, tid := range threads(pid) {
			_ = unix.SchedSetaffinity(tid, &s.all)
		}
	}
	s.Split = false
}

// threads lists the thread ids of process pid.
func threads(pid int) []int {
	ents, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

// descendants lists the processes below pid: children, theirs, and so on.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentOf(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// parentOf reads the parent pid from /proc/<pid>/stat: the field after the
// command, which is in parentheses and may itself hold spaces or ')'.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}
