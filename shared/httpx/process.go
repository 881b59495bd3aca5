package httpx

import (
	"context"
	"log/slog"
	"net/http"
	"os/signal"
	"syscall"
)

// Process is one run of a service's main from its start to its exit: the
// scaffolding the ledger's and the proxy's share. Start takes the listeners
// and makes the Lifecycle, told to stop at SIGINT or SIGTERM; the service
// wires itself under Context and Stopping; Serve serves until the signal and
// drains; Close, deferred right after Start, releases what Start took.
type Process struct {
	*Lifecycle
	name     string // the service, as its log lines say it
	addr     string
	maxConns int
	lns      Listeners
	log      *slog.Logger
	stop     context.CancelFunc // lets the signals go; Stopping is then done
}

// Start starts the run of the service name on addr (read from addrVar) with
// s's settings: the signals are caught first, then the listeners taken
// (ListenAll: addr, METRICS_ADDR, DEBUG_ADDR), so that a taken port stops the
// start before anything is contacted or said to listen.
func Start(name, addrVar, addr string, s Serving, log *slog.Logger) (*Process, error) {
	stopping, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	lns, err := ListenAll(addrVar, addr, s.MetricsAddr, s.DebugAddr, log)
	if err != nil {
		stop()
		return nil, err
	}
	return &Process{
		Lifecycle: NewLifecycle(stopping, s.Shutdown, log),
		name:      name, addr: addr, maxConns: s.MaxClientConns, lns: lns, log: log, stop: stop,
	}, nil
}

// ServeMetrics serves m's /metrics on METRICS_ADDR's listener, when it is set
// (on the main listener otherwise: service.Config.MetricsElsewhere).
func (p *Process) ServeMetrics(m *Metrics) { m.ServeMetricsOn(p.lns.Metrics, p.log) }

// Serve serves h on the main listener (NewServer, at most MAX_CONNS
// connections), says "<name> listening" with attrs, and returns once the
// requests in flight were drained after the signal (Lifecycle.Serve), or at
// once when serving failed: Stopping is done either way, so that what watches
// it (background jobs) stops too.
func (p *Process) Serve(h http.Handler, attrs ...any) error {
	p.log.Info(p.name+" listening", append([]any{"addr", p.addr}, attrs...)...)
	err := p.Lifecycle.Serve(p.lns.Main, NewServer(p.addr, h), p.maxConns)
	p.stop()
	return err
}

// Close ends the run, after the service closed what it opened: the main
// listener closed, the lifetime ended (Lifecycle.End), the signals let go.
func (p *Process) Close() {
	p.lns.Main.Close()
	p.End()
	p.stop()
}
