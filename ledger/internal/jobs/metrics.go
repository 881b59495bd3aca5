package jobs

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/httpx"
)

// Metrics are the background jobs' metrics: the sweeper's and the
// reconciler's.
type Metrics struct {
	expired        prometheus.Counter
	reconcileDrift *httpx.BoundedGauge
	ReconcileFixes *prometheus.CounterVec
	// reconcileRepairs counts reconciles that repaired Redis, by kind
	// (repairKinds): each is a bug or a Redis data loss to look into.
	ReconcileRepairs *prometheus.CounterVec
	// reconcileSkipped counts vouchers a reconcile run left alone: unchanged
	// since their last clean reconcile.
	reconcileSkipped prometheus.Counter
	remaining        *httpx.BoundedGauge
}

// NewMetrics registers the jobs' metrics on reg (nil: a throwaway
// registry, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f, reg := httpx.NewFactory(reg)
	m := &Metrics{
		expired: f.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_expiry_released_total",
			Help: "Reservations released by the expiry sweeper.",
		}),
		reconcileDrift: httpx.NewBoundedGauge(reg, prometheus.GaugeOpts{
			Name: "flashgate_reconcile_drift",
			Help: "Redis remaining minus database remaining per voucher, at the last reconcile (before fixing); at least the orders it restored.",
		}, httpx.MaxVoucherSeries),
		ReconcileFixes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "flashgate_reconcile_fixes_total",
			Help: "Orders the reconciler released (hanging admissions) or restored in Redis, and vouchers it reloaded.",
		}, []string{"action"}),
		ReconcileRepairs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "flashgate_reconcile_repairs_total",
			Help: "Reconciles that repaired Redis, by kind: remaining (the counter disagreed with the orders Redis held), orders_restored, orders_released, terms. Each is a bug or a Redis data loss.",
		}, []string{"kind"}),
		reconcileSkipped: f.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_reconcile_skipped_total",
			Help: "Vouchers a reconcile run skipped: nothing changed in the database or Redis since their last clean reconcile.",
		}),
		remaining: httpx.NewBoundedGauge(reg, prometheus.GaugeOpts{
			Name: "flashgate_reconcile_remaining",
			Help: "Uses left per voucher at the last reconcile, as the database and Redis have them (the proxy's flashgate_voucher_remaining is the last script reply).",
		}, httpx.MaxVoucherSeries, "source"),
	}
	for _, kind := range repairKindNames {
		m.ReconcileRepairs.WithLabelValues(kind) // every kind exported from the start: increase() sees the first
	}
	return m
}
