package outbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/httpx"
)

// Metrics are the event outbox's metrics. Only the delivering ledger
// counts and measures: sum them over the ledgers.
type Metrics struct {
	eventsWritten   prometheus.Counter
	eventsDelivered *prometheus.CounterVec // by sink
	eventsFailed    *prometheus.CounterVec // by sink: parked after their attempts
	eventErrors     *prometheus.CounterVec // by sink: failed attempts
	eventLag        *prometheus.GaugeVec   // by sink
	EventLeader     prometheus.Gauge
	eventsPruned    prometheus.Counter
}

// NewMetrics registers the outbox's metrics on reg (nil: a throwaway
// registry, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f, _ := httpx.NewFactory(reg)
	m := &Metrics{}
	m.eventsWritten = f.NewCounter(prometheus.CounterOpts{
		Name: "flashgate_events_written_total",
		Help: "Events committed to the outbox, counted by the delivering ledger as they pass the watermark.",
	})
	m.eventsDelivered = f.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_events_delivered_total",
		Help: "Events a sink accepted (webhook 2xx, Kafka ack), per sink.",
	}, []string{"sink"})
	m.eventsFailed = f.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_events_failed_total",
		Help: "Events a sink gave up on after WEBHOOK_MAX_ATTEMPTS, parked as failed, per sink.",
	}, []string{"sink"})
	m.eventErrors = f.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_event_delivery_errors_total",
		Help: "Failed delivery attempts (answers other than 2xx, timeouts, refused batches), per sink.",
	}, []string{"sink"})
	m.eventLag = f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flashgate_event_delivery_lag_seconds",
		Help: "Age of the oldest event a sink has not delivered yet (0: caught up), per sink.",
	}, []string{"sink"})
	m.EventLeader = f.NewGauge(prometheus.GaugeOpts{
		Name: "flashgate_event_dispatcher_leader",
		Help: "1 while this ledger holds the dispatcher's lock and delivers the events.",
	})
	m.eventsPruned = f.NewCounter(prometheus.CounterOpts{
		Name: "flashgate_events_pruned_total",
		Help: "Delivered events deleted after EVENT_RETENTION.",
	})
	return m
}
