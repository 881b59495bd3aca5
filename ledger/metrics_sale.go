package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/httpx"
)

// writerMetrics are the group commit's metrics.
type writerMetrics struct {
	writeBatch    prometheus.Histogram
	commitLatency prometheus.Histogram
}

// newWriterMetrics registers the group commit's metrics on reg.
func newWriterMetrics(reg prometheus.Registerer) *writerMetrics {
	m := &writerMetrics{
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
	}
	reg.MustRegister(m.writeBatch, m.commitLatency)
	return m
}

// Measure has w count its batch sizes and time its commits on m.
func (w *Writer) Measure(m *writerMetrics) {
	w.ObserveSizes(func(n int) { m.writeBatch.Observe(float64(n)) })
	w.ObserveCommits(func(d time.Duration) { m.commitLatency.Observe(d.Seconds()) })
}
