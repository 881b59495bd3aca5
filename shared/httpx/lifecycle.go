package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/flashgate/flashgate/shared/envconf"
)

// Shutdown is how a service stops when told to (SIGTERM, SIGINT).
type Shutdown struct {
	Delay   time.Duration // SHUTDOWN_DELAY: serving on, not ready, so that load balancers move away
	Timeout time.Duration // SHUTDOWN_TIMEOUT: from the signal to the exit
}

// Check refuses a Timeout that leaves no room, after Delay, for a request in
// flight to finish: work is the longest a request may take (its deadline),
// named by workVar in the message.
func (s Shutdown) Check(work time.Duration, workVar string) error {
	if s.Timeout <= s.Delay+work {
		return fmt.Errorf("SHUTDOWN_TIMEOUT (%s) must be above SHUTDOWN_DELAY (%s) plus %s (%s): "+
			"requests in flight when the service stops accepting need that long to finish",
			s.Timeout, s.Delay, workVar, work)
	}
	return nil
}

// ErrStopping is readiness's answer once the service was told to stop.
var ErrStopping = errors.New("stopping: told to shut down")

// Lifecycle runs a service's graceful stop. At the signal, /readyz answers 503
// (readiness checks call Err first) and background jobs stop between runs
// (they watch Stopping); the service keeps serving for Shutdown.Delay, then
// stops accepting and lets requests in flight finish with their real answer:
// what they wait on (batches, forwarded writes, group commits) runs under
// Context, the service's lifetime, which ends only when main calls End after
// the drain, or at the shutdown deadline at the latest.
type Lifecycle struct {
	cfg      Shutdown
	log      *slog.Logger
	stopping context.Context
	life     context.Context
	end      context.CancelFunc
}

// NewLifecycle returns the lifecycle of a service told to stop when stopping
// ends (signal.NotifyContext).
func NewLifecycle(stopping context.Context, cfg Shutdown, log *slog.Logger) *Lifecycle {
	life, end := context.WithCancel(context.WithoutCancel(stopping))
	return &Lifecycle{cfg: cfg, log: log, stopping: stopping, life: life, end: end}
}

// Stopping ends at the signal: background jobs stop between runs, watchers end.
func (l *Lifecycle) Stopping() context.Context { return l.stopping }

// Context is the service's lifetime: work that serves requests runs under it
// and outlives the HTTP drain.
func (l *Lifecycle) Context() context.Context { return l.life }

// End ends the lifetime; main calls it once the drain is over and the
// background jobs returned.
func (l *Lifecycle) End() { l.end() }

// Err is ErrStopping once the service was told to stop, else nil.
func (l *Lifecycle) Err() error {
	if l.stopping.Err() != nil {
		return ErrStopping
	}
	return nil
}

// shutdownMargin is the part of SHUTDOWN_TIMEOUT kept for what follows the
// drain (background jobs returning, pools closing).
func (l *Lifecycle) shutdownMargin() time.Duration { return min(time.Second, l.cfg.Timeout/10) }

// Listen opens a service's listener on addr, read from addrVar, before the
// service contacts anything: a taken or foreign address stops the start at
// once (envconf.ErrBadSetting: exit 2), naming the variable, and before any
// line says the service listens. An empty addr (an optional listener left
// unset) gives no listener and no error.
func Listen(addrVar, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w: %w", addrVar, addr, err, envconf.ErrBadSetting)
	}
	return ln, nil
}

// Listeners are a service's listeners, bound before it contacts anything.
type Listeners struct {
	Main, Metrics net.Listener // Metrics is nil when METRICS_ADDR is unset
}

// ListenAll binds a service's address (addrVar=addr), METRICS_ADDR and
// DEBUG_ADDR (serving pprof on the last at once), so that a taken port stops
// the start before anything is contacted or said to listen. On an error
// nothing stays bound but the debug listener, which lives with the process.
func ListenAll(addrVar, addr, metricsAddr, debugAddr string, log *slog.Logger) (Listeners, error) {
	ln, err := Listen(addrVar, addr)
	if err != nil {
		return Listeners{}, err
	}
	metrics, err := Listen("METRICS_ADDR", metricsAddr)
	if err != nil {
		ln.Close()
		return Listeners{}, err
	}
	if err := ServeDebug(debugAddr, log); err != nil {
		ln.Close()
		if metrics != nil {
			metrics.Close()
		}
		return Listeners{}, err
	}
	return Listeners{Main: ln, Metrics: metrics}, nil
}

// Serve serves srv on ln (Listen) with at most maxConns client connections open at
// once (idle keep-alive ones are closed to make room; see limitConns) and
// serves until told to stop, then runs the shutdown sequence: not ready at
// once, serving for Delay (answers say Connection: close, so clients and load
// balancers reconnect elsewhere), then no new connections while requests in
// flight finish, all within Timeout of the signal. A failure to listen or serve
// is returned at once.
func (l *Lifecycle) Serve(ln net.Listener, srv *http.Server, maxConns int) error {
	countConns(srv, &openConns)
	if maxConns > 0 {
		ln = limitConns(ln, maxConns, srv)
	}
	srv.Handler = l.closeWhenStopping(srv.Handler)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-l.stopping.Done():
	}
	deadline := time.Now().Add(l.cfg.Timeout - l.shutdownMargin())
	// Whatever still runs at the deadline is cut, after the drain too (the
	// background jobs main waits for).
	time.AfterFunc(time.Until(deadline), l.end)
	l.log.Info("stopping: /readyz answers 503, serving on for SHUTDOWN_DELAY",
		"shutdown_delay", l.cfg.Delay.String(), "shutdown_timeout", l.cfg.Timeout.String())
	select {
	case err := <-errc:
		return err
	case <-time.After(l.cfg.Delay):
	}
	l.log.Info("draining: no new connections, requests in flight finish")
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
		l.end()
		return fmt.Errorf("drain not finished within SHUTDOWN_TIMEOUT (%s): %w", l.cfg.Timeout, err)
	}
	return nil
}

// closeWhenStopping marks every answer given after the signal Connection:
// close, so that keep-alive clients reconnect (through their load balancer,
// to an instance that is ready) instead of holding a connection that the
// drain will close under them.
func (l *Lifecycle) closeWhenStopping(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.stopping.Err() != nil {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}
