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
		MaxClientConns: e.Int("MAX_CONNS", 10_000, 1),
		MaxInflight:    e.Int("MAX_INFLIGHT", 256, 1),
		DebugAddr:      e.String("DEBUG_ADDR", ""),
		Shutdown: Shutdown{
			Delay:   e.DurationMin("SHUTDOWN_DELAY", 5*time.Second, 0),
			Timeout: e.Duration("SHUTDOWN_TIMEOUT", 25*time.Second),
		},
	}
}
