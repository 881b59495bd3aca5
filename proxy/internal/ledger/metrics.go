package ledger

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/flashgate/flashgate/shared/httpx"
)

// BreakerState is a circuit breaker's state as its gauge says it: the
// ledger's (flashgate_ledger_breaker_state) and Redis's
// (flashgate_redis_breaker_state).
func BreakerState(s gobreaker.State) float64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}

// NewLatency is the latency of the proxy's calls to the ledger
// (Client.ObserveLatency), registered on reg.
func NewLatency(reg prometheus.Registerer) *prometheus.HistogramVec {
	f, _ := httpx.NewFactory(reg)
	return f.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flashgate_ledger_request_duration_seconds",
		Help:    "Latency of the proxy's calls to the ledger, by call.",
		Buckets: httpx.LatencyBuckets,
	}, []string{"call"})
}
