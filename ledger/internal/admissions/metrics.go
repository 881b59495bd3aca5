package admissions

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the admissions log's metrics, on the consuming ledgers: sum
// the counters over them; a partition's lag is reported by the ledger that
// owns it.
type Metrics struct {
	written    prometheus.Counter
	DeadLetter prometheus.Counter   // read by the tests
	lagRecords *prometheus.GaugeVec // by partition
	lagSeconds *prometheus.GaugeVec // by partition
	faults     prometheus.Counter
}

// NewMetrics registers the admissions log's metrics on reg (nil: a throwaway
// registry, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_admissions_consumed_total",
			Help: "Admission records the consumer wrote or found written (redeliveries included).",
		}),
		DeadLetter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_admissions_dead_letter_total",
			Help: "Admission records the database refused, sent to the dead-letter topic with their uses given back.",
		}),
		lagRecords: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flashgate_admissions_lag_records",
			Help: "Admission records of a partition not written yet (high watermark - next offset).",
		}, []string{"partition"}),
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flashgate_admissions_lag_seconds",
			Help: "Age of the newest admission record written from a partition while records wait behind it (0: caught up).",
		}, []string{"partition"}),
		faults: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_admissions_write_faults_total",
			Help: "Batches of admissions the database could not decide (written again after a pause).",
		}),
	}
	reg.MustRegister(m.written, m.DeadLetter, m.lagRecords, m.lagSeconds, m.faults)
	return m
}

// ObserveLag records a partition's lag after a batch of it was written:
// records not written yet and the age of the newest written while records
// wait behind it.
func (m *Metrics) ObserveLag(partition int32, records int64, seconds float64) {
	label := strconv.Itoa(int(partition))
	m.lagRecords.WithLabelValues(label).Set(float64(records))
	m.lagSeconds.WithLabelValues(label).Set(seconds)
}
