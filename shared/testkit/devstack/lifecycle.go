package devstack

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// errAddrInUse marks a start that failed because another process took the port.
var errAddrInUse = errors.New("address already in use")

// startAttempts bounds retries when a free port is taken between FreePort and bind.
const startAttempts = 3

// startOnPort calls start with port, or, when port is 0, with a free port, trying
// another one while the last was taken between FreePort and bind.
func startOnPort(port int, start func(port int) error) error {
	for attempt := 1; ; attempt++ {
		p := port
		if p == 0 {
			var err error
			if p, err = FreePort(); err != nil {
				return err
			}
		}
		err := start(p)
		if err == nil || port != 0 || attempt == startAttempts || !errors.Is(err, errAddrInUse) {
			return err
		}
	}
}

// lifecycle is how Redis, Postgres and Service start, stop, kill and restart their
// process: one lock, one process, and what Stop removes. They embed it for Stop, Kill
// and Restart.
type lifecycle struct {
	name  func() string         // names the process in errors, e.g. "redis-server 127.0.0.1:6379"
	run   func() (*proc, error) // starts the process and waits until it is ready
	sig   os.Signal             // asks the process to stop
	grace time.Duration         // how long Stop waits after sig before killing
	kill  func(p *proc) error   // nil: kill the process alone
	clean func() error          // nil: Stop leaves nothing to remove
	kept  string                // what clean removes, for Restart's error: "its dir"

	mu      sync.Mutex
	proc    *proc
	cleaned bool // Stop ran clean; nothing left to restart
}

// launch runs the process. l.mu is held or l is unshared.
func (l *lifecycle) launch() error {
	p, err := l.run()
	if err != nil {
		return err
	}
	l.proc = p
	return nil
}

// stop asks the process to exit and kills what is left after the grace period. l.mu is
// held.
func (l *lifecycle) stop() error {
	if l.proc == nil {
		return nil
	}
	if err := l.proc.stop(l.sig, l.grace); err != nil {
		l.killProc()
		return err
	}
	return nil
}

// killProc kills the process as a crash would. l.mu is held.
func (l *lifecycle) killProc() error {
	if l.proc == nil {
		return nil
	}
	if l.kill != nil {
		return l.kill(l.proc)
	}
	l.proc.kill()
	return nil
}

// Stop stops the process, killing it if it ignores the signal for the grace period, and
// removes what Restart would need. It is idempotent.
func (l *lifecycle) Stop() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.stop()
	if err != nil {
		err = fmt.Errorf("stop %s: %w", l.name(), err)
	}
	if l.clean != nil && !l.cleaned {
		if cleanErr := l.clean(); cleanErr != nil && err == nil {
			err = cleanErr
		}
		l.cleaned = true
	}
	return err
}

// Kill kills the process, as a crash would, and keeps what Restart needs to recover.
func (l *lifecycle) Kill() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.killProc()
}

// Pause stops the process and its children with SIGSTOP, as a hung host or a
// stalled disk would: connections stay open and nothing answers. Resume
// continues them.
func (l *lifecycle) Pause() error { return l.signalAll(syscall.SIGSTOP) }

// Resume continues a paused process and its children (SIGCONT).
func (l *lifecycle) Resume() error { return l.signalAll(syscall.SIGCONT) }

// signalAll sends sig to the process and then to its children (Postgres's
// backends; none for the others).
func (l *lifecycle) signalAll(sig syscall.Signal) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.proc.running() {
		return fmt.Errorf("signal %s: not running", l.name())
	}
	pid := l.proc.pid()
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %s: %w", l.name(), err)
	}
	for _, child := range childPids(pid) {
		syscall.Kill(child, sig) // ESRCH: it exited meanwhile
	}
	return nil
}

// Restart stops the process if it is running, starts it again the same way (same port,
// same data) and waits until it is ready.
func (l *lifecycle) Restart() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cleaned {
		return fmt.Errorf("restart %s: stopped and %s removed", l.name(), l.kept)
	}
	if err := l.stop(); err != nil {
		return fmt.Errorf("restart %s: %w", l.name(), err)
	}
	return l.launch()
}

// running reports whether the process is up.
func (l *lifecycle) running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proc.running()
}

// removeDir returns a clean func that removes dir; what names it in the error.
func removeDir(what, dir string) func() error {
	return func() error {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", what, err)
		}
		return nil
	}
}

// Pid is the running process's id, or 0 when it is not running: for the load harness,
// which reads its CPU time (and its children's, for Postgres) from /proc.
func (l *lifecycle) Pid() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.proc.running() {
		return 0
	}
	return l.proc.pid()
}
