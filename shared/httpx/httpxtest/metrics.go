package httpxtest

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// CheckMetricsDocumented checks service's metrics against the Operations
// metrics table of the README at readme: every metric documented for service
// is registered on reg and scraped from h's /metrics, without a token, with
// the documented type; and every flashgate_* family scraped is documented.
// The caller first sends the requests that give each metric a series.
func CheckMetricsDocumented(tb testing.TB, h http.Handler, reg *prometheus.Registry, readme, service string) {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, api.MetricsPath, nil))
	require.Equal(tb, http.StatusOK, rec.Code, "GET /metrics without a token: %s", rec.Body)
	scraped := scrapedMetricTypes(rec.Body.Bytes())

	documented := readmeMetrics(tb, readme, service)
	for name, typ := range documented {
		if !metricRegistered(reg, name) {
			tb.Errorf("%s is in the README for the %s but not registered", name, service)
			continue
		}
		got, ok := scraped[name]
		switch {
		case !ok:
			tb.Errorf("%s is registered but not on /metrics after a reserve", name)
		case got != typ:
			tb.Errorf("%s is a %s on /metrics, the README says %s", name, got, typ)
		}
	}
	for name := range scraped {
		if _, ok := documented[name]; strings.HasPrefix(name, "flashgate_") && !ok {
			tb.Errorf("%s is on the %s's /metrics but not in the README's metrics table", name, service)
		}
	}
}

// readmeMetrics reads the Operations metrics table of the README at path: the
// metrics documented for service, with their types.
func readmeMetrics(tb testing.TB, path, service string) map[string]string {
	tb.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(tb, err)
	_, ops, ok := strings.Cut(string(raw), "\n## Operations\n")
	require.True(tb, ok, "README.md has no Operations section")
	out := map[string]string{}
	for line := range strings.Lines(ops) {
		if !strings.HasPrefix(line, "| `flashgate_") {
			continue
		}
		cells := strings.Split(line, "|")
		require.GreaterOrEqual(tb, len(cells), 4, "metrics table row %q", line)
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		for _, s := range strings.Split(cells[2], ",") {
			if strings.TrimSpace(s) == service {
				out[name] = strings.TrimSpace(cells[3])
			}
		}
	}
	require.NotEmpty(tb, out, "README's metrics table lists nothing for %s", service)
	return out
}

// scrapedMetricTypes returns the families of a text-format scrape by name, with
// their types.
func scrapedMetricTypes(scrape []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(scrape))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// metricRegistered reports whether reg has a collector for name, including a
// vector with no series yet (which Gather and a scrape leave out): registering
// a probe under the same name with another help text fails exactly then.
func metricRegistered(reg *prometheus.Registry, name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe for " + name})
	if err := reg.Register(probe); err != nil {
		return true
	}
	reg.Unregister(probe)
	return false
}
