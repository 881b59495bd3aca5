package sale

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/httpx"
)

// Metrics are the group commit's metrics.
type Metrics struct {
	writeBatch    prometheus.Histogram
	commitLatency prometheus.Histogram
}

// NewMetrics registers the group commit's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f, _ := httpx.NewFactory(reg)
	m := &Metrics{
		writeBatch: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "flashgate_ledger_write_batch_size",
			Help:    "Admitted reservations written per transaction (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		commitLatency: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "flashgate_ledger_commit_duration_seconds",
			Help:    "Duration of one group write transaction, begin to commit.",
			Buckets: httpx.LatencyBuckets,
		}),
	}
	return m
}

// Measure has w count its batch sizes and time its commits on m.
func (w *Writer) Measure(m *Metrics) {
	w.ObserveSizes(func(n int) { m.writeBatch.Observe(float64(n)) })
	w.observeCommits(func(d time.Duration) { m.commitLatency.Observe(d.Seconds()) })
}
