package admissions

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/httpx"
)

// Metrics are the admissions log's metrics, on the consuming ledgers: sum
// the counters over them. The lag is the group's, measured from the broker
// by every ledger (GroupLag): take the largest over them, never the sum.
type Metrics struct {
	written     prometheus.Counter
	DeadLetter  prometheus.Counter   // read by the tests
	lagRecords  *prometheus.GaugeVec // by partition
	lagSeconds  *prometheus.GaugeVec // by partition
	groupLag    prometheus.Gauge
	lagFailures prometheus.Counter
	faults      prometheus.Counter
}

// NewMetrics registers the admissions log's metrics on reg (nil: a throwaway
// registry, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f, _ := httpx.NewFactory(reg)
	m := &Metrics{
		written: f.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_admissions_consumed_total",
			Help: "Admission records the consumer wrote or found written (redeliveries included).",
		}),
		DeadLetter: f.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_admissions_dead_letter_total",
			Help: "Admission records the database refused, sent to the dead-letter topic with their uses given back.",
		}),
		lagRecords: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flashgate_admissions_lag_records",
			Help: "Admission records of a partition the consumer group has not committed yet (end offset - the group's committed offset), measured from the broker by every ledger.",
		}, []string{"partition"}),
		lagSeconds: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flashgate_admissions_lag_seconds",
			Help: "Age of the newest admission record written from a partition while records wait behind it (0: caught up).",
		}, []string{"partition"}),
		groupLag: f.NewGauge(prometheus.GaugeOpts{
			Name: "flashgate_admissions_group_lag_seconds",
			Help: "The consumer group's lag that the reconciler and the settler trust: every admission acknowledged longer ago was committed by the group, and no produce of this ledger is in flight longer (-1: not known yet, no hold of a log voucher is freed).",
		}),
		lagFailures: f.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_admissions_lag_measure_failures_total",
			Help: "Measurements of the consumer group's lag the broker did not answer (the lag grows meanwhile).",
		}),
		faults: f.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_admissions_write_faults_total",
			Help: "Batches of admissions the database could not decide (written again after a pause).",
		}),
	}
	return m
}

func partitionLabel(p int32) string { return strconv.Itoa(int(p)) }

// ObserveLag sets a partition's lag series: records the group has not
// committed and the time since it had committed them all.
func (m *Metrics) ObserveLag(partition int32, records int64, seconds float64) {
	m.lagRecords.WithLabelValues(partitionLabel(partition)).Set(float64(records))
	m.lagSeconds.WithLabelValues(partitionLabel(partition)).Set(seconds)
}
