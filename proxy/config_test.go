package main

import (
	"strings"
	"testing"

	"github.com/flashgate/flashgate/shared/envconf"
	"github.com/flashgate/flashgate/shared/httpx/httpxtest"
)

// TestSettingsDocumented checks that every setting the proxy reads has a
// meaning for --help and a README row with the same default.
func TestSettingsDocumented(t *testing.T) {
	httpxtest.CheckSettingsDocumented(t, configFrom, "../README.md", "Proxy")
}

// TestConfigSwitch checks that PROXY_COALESCE takes on/off, true/false and
// 1/0, and that anything else stops the start naming the variable.
func TestConfigSwitch(t *testing.T) {
	for v, want := range map[string]bool{"on": true, "true": true, "1": true, "TRUE": true, "off": false, "false": false, "0": false} {
		c, err := configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "PROXY_COALESCE": v}))
		if err != nil || c.Coalesce != want {
			t.Errorf("configFrom(PROXY_COALESCE=%s) = %v, %v, want %v", v, c.Coalesce, err, want)
		}
	}
	_, err := configFrom(envconf.NewFrom(map[string]string{"REDIS_URL": "redis://x", "PROXY_COALESCE": "yes please"}))
	if err == nil || !strings.Contains(err.Error(), "PROXY_COALESCE") {
		t.Errorf("configFrom(PROXY_COALESCE=yes please) = %v, want an error naming PROXY_COALESCE", err)
	}
}

// TestCommandLine runs bin/proxy --help and --version: exit 0, every setting listed.
func TestCommandLine(t *testing.T) {
	httpxtest.CheckCommandLine(t, proxyBinary(t), "proxy", configFrom)
}
