package httpx

import (
	"cmp"
	"time"

	"github.com/flashgate/flashgate/shared/envconf"
)

// Serving are the settings both services read the same way: how they take
// connections and requests, how they stop, and where pprof listens.
type Serving struct {
	MaxClientConns int           // MAX_CONNS: open client connections (idle ones make room at the cap)
	MaxInflight    int           // MAX_INFLIGHT: requests worked on at once, the excess waits or is shed; 0: the bound sizes itself (InflightCap)
	LatencySLO     time.Duration // LATENCY_SLO: the excess waits for a slot up to half of it while its queue does not stand
	DebugAddr      string        // DEBUG_ADDR: pprof listener, off when empty
	MetricsAddr    string        // METRICS_ADDR: /metrics on its own listener; empty: on the main one
	Shutdown       Shutdown      // SHUTDOWN_DELAY, SHUTDOWN_TIMEOUT
}

// DefaultLatencySLO is LATENCY_SLO's default, and the adaptive bound's SLO
// when LATENCY_SLO is 0.
const DefaultLatencySLO = 100 * time.Millisecond

// InflightStart is where the adaptive bound on requests in flight starts
// (MAX_INFLIGHT 0; overload.Shedder).
const InflightStart = 256

// InflightCap is the most the adaptive bound on requests in flight may reach
// (MAX_CONNS: one request per connection at most) when MAX_INFLIGHT is 0, and
// 0 when MAX_INFLIGHT is set.
func (s Serving) InflightCap() int {
	if s.MaxInflight > 0 {
		return 0
	}
	return s.MaxClientConns
}

// StartBound is the bound on requests in flight a service starts with:
// MAX_INFLIGHT, or where the self-sized bound starts when it is 0.
func (s Serving) StartBound() int { return cmp.Or(s.MaxInflight, InflightStart) }

// ReadServing reads the Serving settings from e, with their defaults.
func ReadServing(e *envconf.Reader) Serving {
	return Serving{
		MaxClientConns: e.Int("MAX_CONNS", 10_000, 1,
			"most client connections open at once; at the cap the one idle the longest is closed to make room"),
		MaxInflight: e.Int("MAX_INFLIGHT", 256, 0,
			"most requests worked on at once; the excess waits for a slot (LATENCY_SLO), else gets 503 UNAVAILABLE with Retry-After (1-3 s); 0: the bound sizes itself from what requests take now: from 256, every quarter of LATENCY_SLO in which a request found it full, it moves by half of LATENCY_SLO over the mean time requests held their slots (grows while they keep within that and the growth raises the answers per second, shrinks back when they do not, never below 256 nor above MAX_CONNS; not reached, it drifts back to 256)"),
		LatencySLO: e.DurationMin("LATENCY_SLO", DefaultLatencySLO, 0,
			"the answer time aimed for; a request over MAX_INFLIGHT waits for a slot up to half of it, unless the waits stood over a quarter of it for a whole LATENCY_SLO (CoDel: more arrive than are answered), then it gets 503 at once; 0: no wait, the excess gets 503 at once"),
		DebugAddr: e.Addr("DEBUG_ADDR", "", "when set (e.g. 127.0.0.1:6061), serves net/http/pprof there"),
		MetricsAddr: e.Addr("METRICS_ADDR", "",
			"when set (e.g. 127.0.0.1:9090), serves /metrics there alone and no longer on the main listener; empty: /metrics stays on the main listener, open without a token"),
		Shutdown: Shutdown{
			Delay: e.DurationMin("SHUTDOWN_DELAY", 5*time.Second, 0,
				"after SIGTERM, how long it keeps serving with /readyz answering 503 so that balancers move away"),
			Timeout: e.Duration("SHUTDOWN_TIMEOUT", 25*time.Second,
				"from the signal to the exit: the drain of requests in flight ends by then"),
		},
	}
}
