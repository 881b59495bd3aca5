package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/httpx"
)

// ledgerMetrics are the ledger's own metrics; the HTTP ones come from httpx.
type ledgerMetrics struct {
	writeBatch     prometheus.Histogram
	commitLatency  prometheus.Histogram
	expired        prometheus.Counter
	reconcileDrift *httpx.BoundedGauge
	reconcileFixes *prometheus.CounterVec
	remaining      *httpx.BoundedGauge
}

// newLedgerMetrics registers the ledger's metrics on reg (nil: a throwaway
// registry, for tests).
func newLedgerMetrics(reg prometheus.Registerer) *ledgerMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &ledgerMetrics{
		writeBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flashgate_ledger_write_batch_size",
			Help:    "Admitted reservations written per transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flashgate_ledger_commit_duration_seconds",
			Help:    "Duration of one group write transaction, begin to commit.",
			Buckets: httpx.LatencyBuckets,
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_expiry_released_total",
			Help: "Reservations released by the expiry sweeper.",
		}),
		reconcileDrift: httpx.NewBoundedGauge(reg, prometheus.GaugeOpts{
			Name: "flashgate_reconcile_drift",
			Help: "Redis remaining minus database remaining per voucher, at the last reconcile (before fixing); at least the orders it restored.",
		}, httpx.MaxVoucherSeries),
		reconcileFixes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashgate_reconcile_fixes_total",
			Help: "Orders the reconciler released (hanging admissions) or restored in Redis, and vouchers it reloaded.",
		}, []string{"action"}),
		remaining: httpx.NewBoundedGauge(reg, prometheus.GaugeOpts{
			Name: "flashgate_reconcile_remaining",
			Help: "Uses left per voucher at the last reconcile, as the database and Redis have them (the proxy's flashgate_voucher_remaining is the last script reply).",
		}, httpx.MaxVoucherSeries, "source"),
	}
	reg.MustRegister(m.writeBatch, m.commitLatency, m.expired, m.reconcileFixes)
	return m
}
