package httpx

import (
	"fmt"
	"net"
	"strings"

	"github.com/flashgate/flashgate/shared/envconf"
)

// CheckLoopback refuses a listen address (name=addr) that is not held to the
// machine itself: an empty host (every interface), a host name other than
// localhost, or an address outside 127.0.0.0/8 and ::1. pprof (DEBUG_ADDR)
// hands anyone who reaches it the process's heap, its goroutines' stacks and
// a CPU profile on demand, and answers no token. An empty addr (off) passes.
func CheckLoopback(name, addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s=%s: %w: %w", name, addr, err, envconf.ErrBadSetting)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s=%s must be a loopback address such as 127.0.0.1:6061 (it answers without a token): %w",
		name, addr, envconf.ErrBadSetting)
}
