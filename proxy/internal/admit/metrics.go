package admit

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/httpx"
)

// admitMetrics are the admission path's metrics.
type admitMetrics struct {
	outcomes    *prometheus.CounterVec
	outcome     *httpx.Resolved[string, prometheus.Counter] // outcomes by result, resolved once each
	batchSize   prometheus.Histogram
	redisErrors prometheus.Counter
	remaining   *httpx.BoundedGauge
	// stages: how long a flash reserve spends in each stage (the profile of
	// a sale's first second: where the time of an admitted claim goes).
	stages *httpx.Resolved[string, prometheus.Observer]
}

// The stages of a flash reserve, as flashgate_reserve_stage_seconds names them.
const (
	stageGate  = "gate"  // queued for and in the reserve script (its batch)
	stageWrite = "write" // an admitted claim queued for and in the ledger's write
)

func newAdmitMetrics(reg prometheus.Registerer, a *Admitter) *admitMetrics {
	f, reg := httpx.NewFactory(reg)
	m := &admitMetrics{
		outcomes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "flashgate_reserve_total",
			Help: "Reserve requests answered by the proxy, by result (CREATED or the error code).",
		}, []string{"result"}),
		batchSize: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "flashgate_gate_batch_size",
			Help:    "Reservations per reserve-script call (coalescing).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		redisErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_redis_errors_total",
			Help: "Redis calls that failed or timed out (including those refused by the open breaker).",
		}),
		remaining: httpx.NewBoundedGauge(reg, prometheus.GaugeOpts{
			Name: "flashgate_voucher_remaining",
			Help: "Uses left per voucher as the last script call saw them in Redis.",
		}, httpx.MaxVoucherSeries),
	}
	stages := f.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flashgate_reserve_stage_seconds",
		Help:    "Time a flash reserve spends in a stage: gate (queued for and in the reserve script), write (an admitted claim queued for and in the ledger's write).",
		Buckets: httpx.LatencyBuckets,
	}, []string{"stage"})
	m.stages = httpx.NewResolved(func(stage string) prometheus.Observer { return stages.WithLabelValues(stage) })
	m.outcome = httpx.NewResolved(func(result string) prometheus.Counter { return m.outcomes.WithLabelValues(result) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_soldout_flag_hits_total",
		Help: "Reserve requests answered OUT_OF_STOCK by the local sold-out flag, without Redis.",
	}, func() float64 { return float64(a.flagHits.Load()) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_gate_script_calls_total",
		Help: "Lua script calls made to Redis.",
	}, func() float64 { return float64(a.gate.Calls()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flashgate_admit_window",
		Help: "Flash reserves let in at once between the gate and the ledger's answer (sized from ADMIT_WRITE_TARGET); 0 without a window.",
	}, func() float64 {
		if a.window == nil {
			return 0
		}
		return float64(a.window.limitObserved.Load())
	})
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_admit_window_refused_total",
		Help: "Flash reserves answered 503 at once because the admission window was full (the ledger's writes were behind).",
	}, func() float64 {
		if a.window == nil {
			return 0
		}
		return float64(a.window.shed.Load())
	})
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_admit_window_retries_total",
		Help: "Retries of orders holding a use in Redis let through a full admission window (they take no new use).",
	}, func() float64 {
		if a.window == nil {
			return 0
		}
		return float64(a.window.spared.Load())
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flashgate_redis_breaker_state",
		Help: "Redis circuit breaker: 0 closed, 1 half-open, 2 open.",
	}, func() float64 { return ledger.BreakerState(a.breaker.State()) })
	registerCodeMetrics(f, a)
	return m
}

// registerCodeMetrics registers the metrics of the set of voucher codes and
// of the lookups at the ledger.
func registerCodeMetrics(f promauto.Factory, a *Admitter) {
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_proxy_unknown_code_total",
		Help: "Reserves answered VOUCHER_NOT_FOUND by the set of voucher codes, without Redis, the ledger or Postgres.",
	}, func() float64 { return float64(a.codes.Unknown()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flashgate_proxy_voucher_codes",
		Help: "Voucher codes the proxy holds (0 until the first read of the set succeeds).",
	}, func() float64 { return float64(a.codes.Size()) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_proxy_voucher_codes_reads_total",
		Help: "Reads of the whole set of voucher codes from the ledger (at start, then at most once per LIVE_CODES_REFRESH).",
	}, func() float64 { return float64(a.codes.Loads()) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_proxy_voucher_codes_read_errors_total",
		Help: "Reads of the set of voucher codes that failed (the set stays as it was).",
	}, func() float64 { return float64(a.codes.LoadErrors()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flashgate_proxy_ledger_lookups",
		Help: "Lookups at the ledger (a voucher's terms, the set of codes) in flight; at most LEDGER_LOOKUPS.",
	}, func() float64 { return float64(a.lookups.InFlight()) })
	f.NewCounterFunc(prometheus.CounterOpts{
		Name: "flashgate_proxy_ledger_lookups_refused_total",
		Help: "Lookups at the ledger refused because LEDGER_LOOKUPS were in flight (the request got 503).",
	}, func() float64 { return float64(a.lookups.Refused()) })
}
