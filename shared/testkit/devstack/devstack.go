// Package devstack starts throwaway redis-server and PostgreSQL processes on free
// loopback ports for tests, the demo and the load harness, and cleans them up.
//
// Every process it starts is a direct child that the kernel kills with SIGKILL when the
// parent goes away (Pdeathsig), so a crashed test binary leaves no server running. Tests
// reach these servers through package devstacktest, which keeps package testing out of
// the binaries that use devstack.
package devstack

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// FreePort returns a loopback TCP port that was free a moment ago. Another process may take
// it before the caller binds it, so starters retry on "address in use".
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ClosedPort returns a loopback TCP port on which every connection is refused, and the
// function that gives it back. The port stays bound by a socket that never listens and
// does not set SO_REUSEADDR, so no other process can take it meanwhile (a port from
// FreePort can be taken by a parallel test's server and answer).
func ClosedPort() (port int, release func(), err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("closed port: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return 0, nil, fmt.Errorf("closed port: bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		return 0, nil, fmt.Errorf("closed port: %w", err)
	}
	return sa.(*syscall.SockaddrInet4).Port, func() { _ = syscall.Close(fd) }, nil
}

// proc is a running child process whose exit any number of goroutines can wait for.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // what Wait returned; read only after done is closed
}

// startProc starts cmd as a child that is killed when this process dies.
func startProc(cmd *exec.Cmd) (*proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	p := &proc{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Linux sends Pdeathsig when the thread that forked the child exits, not the
		// process. Go may retire idle threads, so the forking thread is held until the
		// child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// run runs cmd to completion as a child process and returns its combined output.
func run(cmd *exec.Cmd) ([]byte, error) {
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	p, err := startProc(cmd)
	if err != nil {
		return nil, err
	}
	<-p.done
	return []byte(out.String()), p.err
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// pid returns the child's process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends sig, waits up to grace for the exit and then kills the process. It reports
// an error only when the process had to be killed; an exit status after sig is expected.
func (p *proc) stop(sig os.Signal, grace time.Duration) error {
	if !p.running() {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %d: %w", p.pid(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	p.kill()
	return fmt.Errorf("pid %d ignored %v for %s and was killed", p.pid(), sig, grace)
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Kill() // only fails when the process is already gone
	<-p.done
}

// startServer runs cmd, a server that will listen on addr, with its output appended to
// logPath, and waits up to timeout until ready passes. If it never does, kill stops the
// server and the error holds what the log gained, marked errAddrInUse when another
// process held the port.
func startServer(cmd *exec.Cmd, addr, logPath string, timeout time.Duration, ready func(*proc) error, kill func(*proc) error) (*proc, error) {
	what := filepath.Base(cmd.Path)
	logFrom := logSize(logPath)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", what, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	p, err := startProc(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	if err := waitReady(p, timeout, func() error { return ready(p) }); err != nil {
		_ = kill(p) // the start failed; that error says more than a failed kill
		tail := logTail(logPath, logFrom)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return nil, fmt.Errorf("start %s on %s: %w\n%s:\n%s", what, addr, err, filepath.Base(logPath), tail)
	}
	return p, nil
}

// waitReady polls ready until it succeeds, the process exits or timeout passes.
func waitReady(p *proc, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	delay := 10 * time.Millisecond
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("exited before it was ready (%v)", p.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", timeout, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// logSize returns the size of the log at path, so a failed start can show only what the
// latest attempt wrote.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns the last lines of the log at path written after byte offset from.
func logTail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	return lastLines(string(b), 25)
}

// lastLines returns the last n lines of s, or "(empty log)".
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "(empty log)"
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
