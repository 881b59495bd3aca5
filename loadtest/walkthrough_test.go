package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }

// stepMark starts each snippet's output in the walk-through's bash: the
// record separator and the snippet's index, on a line of their own.
const stepMark = "\x1e"

// TestREADMEWalkthrough runs README.md's walk-through as a newcomer would.
// The block holding `make run ...` runs in a terminal of its own: the
// Makefile's run target itself (its deps and build taken as done: the test's
// binaries stand in bin/), in a fresh directory, on free ports. Once it has
// written bin/run.env, every other ```sh block runs, in order, in one bash
// (set -euo pipefail) in that directory; each command must exit 0 and print
// what the README shows under it. Then Ctrl-C, as the README says, must stop
// the stack and remove bin/run.env.
func TestREADMEWalkthrough(t *testing.T) {
	t.Parallel()
	snippets := walkthroughSnippets(t, "../README.md")
	require.NotEmpty(t, snippets)
	start := snippets[0]
	require.True(t, strings.HasPrefix(start.text, "make run"), "the walk-through starts with make run: %s", start.describe())
	require.Empty(t, start.shown, "make run runs on; its output is not checked: %s", start.describe())
	for _, s := range snippets[1:] {
		require.NotEqual(t, start.block, s.block, "make run's block holds nothing else: %s", s.describe())
	}

	dir := walkDir(t)
	stack := makeRun(t, dir, start.text)
	runSnippets(t, dir, walkEnv(), snippets[1:])
	stack.interrupt(t) // Ctrl-C
	assert.NoFileExists(t, filepath.Join(dir, "bin", "run.env"), "make run removes bin/run.env when it stops")
	assert.Contains(t, stack.output(), "stopping...")
}

// TestMakeRunSettings: make run's PROXY_ADDR and LEDGER_ADDR choose its
// ports, RUN_FLAGS its token, another setting on its command line reaches
// the services, and bin/run.env says where they are.
func TestMakeRunSettings(t *testing.T) {
	t.Parallel()
	var addrs [2]string
	for i := range addrs {
		port, err := devstack.FreePort()
		require.NoError(t, err)
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", port)
	}
	dir := walkDir(t)
	stack := makeRun(t, dir, fmt.Sprintf("make run PROXY_ADDR=%s LEDGER_ADDR=%s RUN_FLAGS='--token dev-token' RESERVATION_TTL=2m",
		addrs[0], addrs[1]))
	cmd := exec.Command("bash", "-euc", `. bin/run.env; echo "$FLASHGATE_PROXY $FLASHGATE_LEDGER $FLASHGATE_TOKEN ${CHECKOUT_TOKEN_SECRET-unset}"`)
	cmd.Dir, cmd.Env = dir, walkEnv()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "http://"+addrs[0]+" http://"+addrs[1]+" dev-token unset\n", string(out))
	assert.Contains(t, stack.output(), `"reservation_ttl":"2m0s"`, "the ledger got RESERVATION_TTL")
	assert.NotContains(t, stack.output(), "is ignored", "the addresses reach loadtest as flags, not in its environment")
	stack.interrupt(t)
}

// makeRun runs line, a `make run ...`, in a terminal of its own in dir and
// waits until it has written bin/run.env, its owner's alone.
func makeRun(t *testing.T, dir, line string) *group {
	t.Helper()
	terminal := exec.Command("bash", "-c", line)
	terminal.Dir = dir
	terminal.Env = append(walkEnv(), "PATH="+filepath.Join(dir, "shim")+string(os.PathListSeparator)+os.Getenv("PATH"))
	stack := startGroup(t, terminal)
	envFile := filepath.Join(dir, "bin", "run.env")
	require.Eventually(t, func() bool {
		_, err := os.Stat(envFile)
		return err == nil || stack.exited()
	}, 3*time.Minute, 100*time.Millisecond, "make run writes bin/run.env")
	require.False(t, stack.exited(), "make run stopped:\n%s", stack.output())
	info, err := os.Stat(envFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "bin/run.env holds the admin token: its owner's alone")
	return stack
}

// runSnippets runs the snippets in order in one bash in dir, and checks each
// one's output against what the README shows.
func runSnippets(t *testing.T, dir string, env []string, snippets []*snippet) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, s := range snippets {
		fmt.Fprintf(&script, "printf '%s%d\\n'\n%s\n", stepMark, i, s.text)
	}
	fmt.Fprintf(&script, "printf '%send\\n'\n", stepMark)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	var out bytes.Buffer
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, &out, &out
	runErr := cmd.Run()

	outputs := strings.Split(out.String(), stepMark)[1:] // [0] is before the first mark: nothing
	for i, o := range outputs {
		index, text, _ := strings.Cut(o, "\n")
		if index == "end" {
			break
		}
		s := snippets[i]
		t.Logf("README.md:%d: $ %s\n%s", s.line, s.text, text)
		if i == len(outputs)-1 { // the last to start, and no end: it failed
			require.NoError(t, runErr, "%s\nprinted:\n%s", s.describe(), text)
		}
		if len(s.shown) > 0 {
			assert.True(t, matches(s.shown, text), "%s\nprinted:\n%s", s.describe(), text)
		}
	}
	require.NoError(t, runErr, "the walk-through's bash:\n%s", out.String())
	require.Len(t, outputs, len(snippets)+1, "every snippet ran")
}

// walkDir is a directory laid out as a checkout after `make build`: bin/
// holds the commands, and shim/make runs the checkout's Makefile there with
// deps and build taken as done.
func walkDir(t *testing.T) string {
	t.Helper()
	commands := []string{"ledger", "proxy", "loadtest", "flashgatectl"}
	pkgs := make([]string, len(commands))
	for i, c := range commands {
		pkgs[i] = "github.com/flashgate/flashgate/" + c
	}
	built := devstacktest.Binaries(t, pkgs...)
	makefile, err := filepath.Abs("../Makefile")
	require.NoError(t, err)
	realMake, err := exec.LookPath("make")
	require.NoError(t, err, "make run needs make")
	dir := t.TempDir()
	for _, sub := range []string{"bin", "shim"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, sub), 0o755))
	}
	for _, c := range commands {
		require.NoError(t, os.Symlink(filepath.Join(built, c), filepath.Join(dir, "bin", c)))
	}
	shim := fmt.Sprintf("#!/bin/sh\nexec %q -f %q -o deps -o build \"$@\"\n", realMake, makefile)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shim", "make"), []byte(shim), 0o755))
	return dir
}

// walkEnv is this process's environment without what the walk-through must
// get from make run and bin/run.env, and without an enclosing make's flags
// (make test runs this test).
func walkEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "FLASHGATE_") && name != devstacktest.PrebuiltEnv,
			name == "CHECKOUT_TOKEN_SECRET",
			name == "MAKEFLAGS", name == "MFLAGS", name == "MAKELEVEL", name == "MAKEOVERRIDES":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// group is a command in a process group of its own, as a terminal runs it.
type group struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
}

func (g *group) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.out.Write(p)
}

func (g *group) output() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.out.String()
}

func (g *group) exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// startGroup starts cmd in a process group of its own, killed with the test
// binary (Pdeathsig) and, if still running, at the test's end.
func startGroup(t *testing.T, cmd *exec.Cmd) *group {
	t.Helper()
	g := &group{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = g, g
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the thread that started the child: hold it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(g.done)
	}()
	require.NoError(t, <-started)
	t.Cleanup(func() {
		if !g.exited() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-g.done
		}
		if t.Failed() {
			t.Logf("make run's terminal:\n%s", g.output())
		}
	})
	return g
}

// interrupt is Ctrl-C in g's terminal: SIGINT to its process group; it
// fails the test unless g then ends within a minute.
func (g *group) interrupt(t *testing.T) {
	t.Helper()
	require.NoError(t, syscall.Kill(-g.cmd.Process.Pid, syscall.SIGINT))
	select {
	case <-g.done:
	case <-time.After(time.Minute):
		t.Fatalf("make run still runs a minute after Ctrl-C:\n%s", g.output())
	}
}
