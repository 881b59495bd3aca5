package httpx

import (
	"time"

	"github.com/flashgate/flashgate/shared/envconf"
)

// Serving are the settings both services read the same way: how they take
// connections and requests, how they stop, and where pprof listens.
type Serving struct {
	MaxClientConns int      // MAX_CONNS: open client connections (idle ones make room at the cap)
	MaxInflight    int      // MAX_INFLIGHT: requests worked on at once; the excess is shed
	DebugAddr      string   // DEBUG_ADDR: pprof listener, off when empty
	Shutdown       Shutdown // SHUTDOWN_DELAY, SHUTDOWN_TIMEOUT
}

// ReadServing reads the Serving settings from e, with their defaults.
func ReadServing(e *envconf.Reader) Serving {
	return Serving{
		MaxClientConns: e.Int("MAX_CONNS", 10_000, 1,
			"most client connections open at once; at the cap the one idle the longest is closed to make room"),
		MaxInflight: e.Int("MAX_INFLIGHT", 256, 1,
			"most requests worked on at once; the excess gets 503 UNAVAILABLE with Retry-After: 1 at once"),
		DebugAddr: e.String("DEBUG_ADDR", "", "when set (e.g. 127.0.0.1:6061), serves net/http/pprof there"),
		Shutdown: Shutdown{
			Delay: e.DurationMin("SHUTDOWN_DELAY", 5*time.Second, 0,
				"after SIGTERM, how long it keeps serving with /readyz answering 503 so that balancers move away"),
			Timeout: e.Duration("SHUTDOWN_TIMEOUT", 25*time.Second,
				"from the signal to the exit: the drain of requests in flight ends by then"),
		},
	}
}
