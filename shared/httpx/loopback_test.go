package httpx

import (
	"errors"
	"testing"

	"github.com/flashgate/flashgate/shared/envconf"
)

// TestCheckLoopback: only an address held to the machine itself passes; a
// refusal names the variable and is a bad setting (exit 2).
func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"": true, "127.0.0.1:6061": true, "127.9.9.9:0": true, "[::1]:6061": true, "localhost:6061": true, "LOCALHOST:1": true,
		":6061": false, "0.0.0.0:6061": false, "[::]:6061": false, "10.0.0.1:6061": false, "example.com:6061": false, "nonsense": false,
	} {
		err := CheckLoopback("DEBUG_ADDR", addr)
		if (err == nil) != ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok %v", addr, err, ok)
		}
		if err != nil && !errors.Is(err, envconf.ErrBadSetting) {
			t.Errorf("CheckLoopback(%q) = %v, want a bad setting", addr, err)
		}
	}
}
