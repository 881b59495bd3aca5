package load

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// burnEnv makes this test binary a burner (TestBurnHelper): it spends the
// given CPU time, says "burned", and then exits or, with burnHoldEnv, waits
// to be killed.
const (
	burnEnv     = "FLASHGATE_TEST_BURN_CPU"
	burnHoldEnv = "FLASHGATE_TEST_BURN_HOLD"
	burnCPU     = 400 * time.Millisecond
)

// TestBurnHelper is not a test: it is the burner the tests below start.
func TestBurnHelper(t *testing.T) {
	want, err := time.ParseDuration(os.Getenv(burnEnv))
	if err != nil {
		return
	}
	for ownCPU() < want {
		for i := 0; i < 1_000_000; i++ {
			burnSink += i
		}
	}
	os.Stdout.WriteString("burned\n")
	if os.Getenv(burnHoldEnv) != "" {
		time.Sleep(time.Hour)
	}
	os.Exit(0) // at once: no test output, no more CPU
}

// burnSink keeps the burner's loop from being compiled away.
var burnSink int

func ownCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startBurner starts cmd and waits until it printed "burned"; cleanup kills it.
func startBurner(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "burned" {
		t.Fatalf("burner said %q, %v; want burned", line, err)
	}
	return cmd
}

// TestReadProcTimesCountsTheRunsTrees: a root's tree counts the CPU of a
// child that burned a known amount and exited meanwhile (reaped by the root,
// as the postmaster reaps its backends); a process the run did not name,
// burning as much beside it, is not counted, nor is anything under it.
func TestReadProcTimesCountsTheRunsTrees(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before := ReadProcTimes(Procs{"self": os.Getpid()})

	other := exec.Command(exe, "-test.run=^TestBurnHelper$")
	other.Env = append(os.Environ(), burnEnv+"="+burnCPU.String(), burnHoldEnv+"=1")
	startBurner(t, other) // still running, and burned as much

	// The root: a shell that runs the burner to its end, then says so and waits.
	root := exec.Command("sh", "-c", `"$0" -test.run='^TestBurnHelper$' >/dev/null && echo burned && exec sleep 3600`, exe)
	root.Env = append(os.Environ(), burnEnv+"="+burnCPU.String())
	startBurner(t, root)

	after := ReadProcTimes(Procs{"tree": root.Process.Pid, "self": os.Getpid()})
	used := after.Since(before)
	// The burner stops at burnCPU of its own; its start and the shell add a little.
	if got := used["tree"]; got < burnCPU-2*clockTick || got > burnCPU+300*time.Millisecond {
		t.Errorf("tree used %s, want about %s (the exited burner counted once, the other burner not)", got, burnCPU)
	}
	if got := used["self"]; got > burnCPU/2 {
		t.Errorf("self used %s: its children (the burners) counted in it", got)
	}
	if n := PerRequestMicros(used, 1000); n[AllProcs] != n["tree"]+n["self"] {
		t.Errorf("PerRequestMicros = %v, want all = tree + self", n)
	}
}

// A root that is not running reads 0, and so does one restarted meanwhile
// (its new process has used less than the old one had).
func TestProcTimesSinceNeverNegative(t *testing.T) {
	a := ProcTimes{ticks: map[string]uint64{"proxy": 500, "redis": 10}}
	b := ProcTimes{ticks: map[string]uint64{"proxy": 20, "redis": 30, "ledger": 5}}
	got := b.Since(a)
	want := map[string]time.Duration{"proxy": 0, "redis": 20 * clockTick, "ledger": 5 * clockTick}
	for name, d := range want {
		if got[name] != d {
			t.Errorf("Since()[%s] = %s, want %s", name, got[name], d)
		}
	}
}

func TestProcNames(t *testing.T) {
	figures := []map[string]float64{{"wrk": 1, "ceiling": 2, "all": 3}, {"proxy": 1, "redis": 2, "zeta": 1, "all": 4}}
	got := strings.Join(ProcNames(figures, "proxy", "ceiling", "ledger", "redis", "wrk"), ",")
	if want := "proxy,ceiling,redis,wrk,zeta,all"; got != want {
		t.Errorf("ProcNames() = %s, want %s", got, want)
	}
}
