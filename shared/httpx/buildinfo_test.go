package httpx_test

import (
	"testing"

	"github.com/flashgate/flashgate/shared/buildinfo"
	"github.com/flashgate/flashgate/shared/httpx"
)

// TestBuildInfo checks flashgate_build_info{service, version, revision} = 1
// on every service's registry, with the build's own version and revision.
func TestBuildInfo(t *testing.T) {
	families, err := httpx.NewMetrics("ledger").Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "flashgate_build_info" {
			continue
		}
		m := f.GetMetric()
		if len(m) != 1 || m[0].GetGauge().GetValue() != 1 {
			t.Fatalf("flashgate_build_info = %v, want one series of value 1", m)
		}
		labels := map[string]string{}
		for _, l := range m[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		want := map[string]string{"service": "ledger", "version": buildinfo.Version(), "revision": buildinfo.Revision()}
		for k, v := range want {
			if labels[k] != v || v == "" {
				t.Errorf("flashgate_build_info{%s} = %q, want %q", k, labels[k], v)
			}
		}
		return
	}
	t.Fatal("no flashgate_build_info on the registry")
}
