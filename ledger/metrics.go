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
	// reconcileRepairs counts reconciles that repaired Redis, by kind
	// (repairKinds): each is a bug or a Redis data loss to look into.
	reconcileRepairs *prometheus.CounterVec
	// reconcileSkipped counts vouchers a reconcile run left alone: unchanged
	// since their last clean reconcile.
	reconcileSkipped prometheus.Counter
	remaining        *httpx.BoundedGauge

	eventsWritten   prometheus.Counter
	eventsDelivered *prometheus.CounterVec // by sink
	eventsFailed    *prometheus.CounterVec // by sink: parked after their attempts
	eventErrors     *prometheus.CounterVec // by sink: failed attempts
	eventLag        *prometheus.GaugeVec   // by sink
	eventLeader     prometheus.Gauge
	eventsPruned    prometheus.Counter
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
		reconcileRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashgate_reconcile_repairs_total",
			Help: "Reconciles that repaired Redis, by kind: remaining (the counter disagreed with the orders Redis held), orders_restored, orders_released, terms. Each is a bug or a Redis data loss.",
		}, []string{"kind"}),
		reconcileSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_reconcile_skipped_total",
			Help: "Vouchers a reconcile run skipped: nothing changed in the database or Redis since their last clean reconcile.",
		}),
		remaining: httpx.NewBoundedGauge(reg, prometheus.GaugeOpts{
			Name: "flashgate_reconcile_remaining",
			Help: "Uses left per voucher at the last reconcile, as the database and Redis have them (the proxy's flashgate_voucher_remaining is the last script reply).",
		}, httpx.MaxVoucherSeries, "source"),
	}
	for _, kind := range repairKindNames {
		m.reconcileRepairs.WithLabelValues(kind) // every kind exported from the start: increase() sees the first
	}
	m.addEventMetrics()
	reg.MustRegister(m.writeBatch, m.commitLatency, m.expired, m.reconcileFixes, m.reconcileRepairs, m.reconcileSkipped,
		m.eventsWritten, m.eventsDelivered, m.eventsFailed, m.eventErrors, m.eventLag, m.eventLeader, m.eventsPruned)
	return m
}

// addEventMetrics makes the outbox's metrics. Only the delivering ledger
// counts and measures: sum them over the ledgers.
func (m *ledgerMetrics) addEventMetrics() {
	m.eventsWritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flashgate_events_written_total",
		Help: "Events committed to the outbox, counted by the delivering ledger as they pass the watermark.",
	})
	m.eventsDelivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_events_delivered_total",
		Help: "Events a sink accepted (webhook 2xx, Kafka ack), per sink.",
	}, []string{"sink"})
	m.eventsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_events_failed_total",
		Help: "Events a sink gave up on after WEBHOOK_MAX_ATTEMPTS, parked as failed, per sink.",
	}, []string{"sink"})
	m.eventErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_event_delivery_errors_total",
		Help: "Failed delivery attempts (answers other than 2xx, timeouts, refused batches), per sink.",
	}, []string{"sink"})
	m.eventLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flashgate_event_delivery_lag_seconds",
		Help: "Age of the oldest event a sink has not delivered yet (0: caught up), per sink.",
	}, []string{"sink"})
	m.eventLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flashgate_event_dispatcher_leader",
		Help: "1 while this ledger holds the dispatcher's lock and delivers the events.",
	})
	m.eventsPruned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flashgate_events_pruned_total",
		Help: "Delivered events deleted after EVENT_RETENTION.",
	})
}
