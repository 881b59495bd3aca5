package httpx

import (
	"log/slog"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/buildinfo"
)

// Metrics is one service's Prometheus registry with the HTTP metrics both
// services share. Services register their own collectors on Registry.
type Metrics struct {
	Registry  *prometheus.Registry
	requests  *prometheus.HistogramVec
	observers *Resolved[requestLabels, prometheus.Observer]
}

// requestLabels are one series of flashgate_http_request_duration_seconds.
type requestLabels struct {
	route, method string
	status        int
}

// LatencyBuckets suit a path whose target is p99 < 100 ms.
var LatencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// NewFactory is where every component's metrics start: the factory makes each
// metric registered on reg as it is made (promauto), so that none is made and
// left out of the scrape; a nil reg (tests that never scrape) becomes a
// throwaway registry, returned too for what registers itself (BoundedGauge,
// registered gauges read at scrape time).
func NewFactory(reg prometheus.Registerer) (promauto.Factory, prometheus.Registerer) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return promauto.With(reg), reg
}

// NewMetrics returns a registry with Go runtime and process collectors,
// flashgate_http_request_duration_seconds{service, route, method, code},
// flashgate_build_info{service, version, revision} and
// flashgate_http_open_connections{service}.
func NewMetrics(service string) *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f, _ := NewFactory(reg)
	m := &Metrics{
		Registry: reg,
		requests: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "flashgate_http_request_duration_seconds",
			Help:        "HTTP request latency by route template, method and status code.",
			Buckets:     LatencyBuckets,
			ConstLabels: prometheus.Labels{"service": service},
		}, []string{"route", "method", "code"}),
	}
	buildInfo := f.NewGauge(prometheus.GaugeOpts{
		Name:        "flashgate_build_info",
		Help:        "Always 1: the running build's version (stamped by the Makefile) and VCS revision.",
		ConstLabels: prometheus.Labels{"service": service, "version": buildinfo.Version(), "revision": buildinfo.Revision()},
	})
	buildInfo.Set(1)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "flashgate_http_open_connections",
		Help:        "Client connections open on the service's listener, idle keep-alive ones included (each holds a goroutine).",
		ConstLabels: prometheus.Labels{"service": service},
	}, func() float64 { return float64(openConns.Load()) })
	m.observers = NewResolved(func(l requestLabels) prometheus.Observer {
		return m.requests.WithLabelValues(l.route, l.method, strconv.Itoa(l.status))
	})
	return m
}

// Resolved keeps the children of a metric vector by their labels, each
// resolved once: a label lookup hashes every value and takes the vector's
// lock, a Get here reads an immutable map. The key set must be bounded (route
// templates, methodLabel, status codes, error codes).
type Resolved[K comparable, V any] struct {
	resolve func(K) V
	known   atomic.Pointer[map[K]V]
	mu      sync.Mutex // serializes adding a key
}

// NewResolved returns a Resolved that makes a missing child with resolve.
func NewResolved[K comparable, V any](resolve func(K) V) *Resolved[K, V] {
	r := &Resolved[K, V]{resolve: resolve}
	r.known.Store(&map[K]V{})
	return r
}

// Get returns the child for k, resolving it on first use.
func (r *Resolved[K, V]) Get(k K) V {
	if v, ok := (*r.known.Load())[k]; ok {
		return v
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.known.Load()
	if v, ok := old[k]; ok {
		return v
	}
	v := r.resolve(k)
	next := make(map[K]V, len(old)+1)
	maps.Copy(next, old)
	next[k] = v
	r.known.Store(&next)
	return v
}

// Middleware observes every request under its route template (never the raw
// path, so the label set stays bounded).
func (m *Metrics) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		m.observers.Get(requestLabels{route, methodLabel(c.Request.Method), c.Writer.Status()}).
			Observe(time.Since(start).Seconds())
	}
}

// methodLabel keeps the method label bounded: clients may send any token.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// Handler serves the registry at /metrics.
func (m *Metrics) Handler() gin.HandlerFunc {
	h := promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
	return func(c *gin.Context) { h.ServeHTTP(c.Writer, c.Request) }
}

// MaxVoucherSeries bounds the per-voucher series a service exports in each
// BoundedGauge.
const MaxVoucherSeries = 100

// BoundedGauge is a gauge per voucher code that keeps at most max codes: the
// least recently set code's series is dropped, so a flood of codes cannot grow
// the scrape without bound.
type BoundedGauge struct {
	vec   *prometheus.GaugeVec
	max   int
	mu    sync.Mutex
	order []string // least recently set first
}

// NewBoundedGauge registers a gauge with labels (code, extra...) on reg.
func NewBoundedGauge(reg prometheus.Registerer, opts prometheus.GaugeOpts, max int, extra ...string) *BoundedGauge {
	g := &BoundedGauge{vec: prometheus.NewGaugeVec(opts, append([]string{"code"}, extra...)), max: max}
	reg.MustRegister(g.vec)
	return g
}

// Set sets the gauge for code (and the extra label values).
func (g *BoundedGauge) Set(v float64, code string, extra ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, c := range g.order {
		if c == code {
			g.order = append(g.order[:i], g.order[i+1:]...)
			break
		}
	}
	g.order = append(g.order, code)
	if len(g.order) > g.max {
		old := g.order[0]
		g.order = g.order[1:]
		g.vec.DeletePartialMatch(prometheus.Labels{"code": old})
	}
	g.vec.WithLabelValues(append([]string{code}, extra...)...).Set(v)
}

// ServeMetrics registers GET /metrics.
func (m *Metrics) ServeMetrics(r gin.IRoutes) {
	r.GET(api.MetricsPath, m.Handler())
}

// ServeMetricsOn serves GET /metrics alone on ln, its own listener
// (METRICS_ADDR, opened by Listen as the start began, so that a taken port
// failed it first), so that the main listener need not expose it; a nil ln
// (METRICS_ADDR empty) serves nothing: /metrics is then on the main listener.
func (m *Metrics) ServeMetricsOn(ln net.Listener, log *slog.Logger) {
	if ln == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+api.MetricsPath, promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	addr := ln.Addr().String()
	srv := NewServer(addr, mux)
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Warn("metrics listener stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("metrics listening", "addr", addr)
}
