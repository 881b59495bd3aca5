package httpxtest

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// CheckMetricsDocumented checks service's metrics against the metrics table of
// doc (a path from the module's root, e.g. "docs/operations.md"): every metric
// documented for service is registered on reg and scraped from h's /metrics,
// without a token, with the documented type; and every flashgate_* family
// scraped is documented. The caller first sends the requests that give each
// metric a series.
func CheckMetricsDocumented(tb testing.TB, h http.Handler, reg *prometheus.Registry, doc, service string) {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, api.MetricsPath, nil))
	require.Equal(tb, http.StatusOK, rec.Code, "GET /metrics without a token: %s", rec.Body)
	scraped := scrapedMetricTypes(rec.Body.Bytes())

	documented := docMetrics(tb, RepoFile(tb, doc), service)
	for name, typ := range documented {
		if !metricRegistered(reg, name) {
			tb.Errorf("%s is in %s for the %s but not registered", name, doc, service)
			continue
		}
		got, ok := scraped[name]
		switch {
		case !ok:
			tb.Errorf("%s is registered but not on /metrics after a reserve", name)
		case got != typ:
			tb.Errorf("%s is a %s on /metrics, %s says %s", name, got, doc, typ)
		}
	}
	for name := range scraped {
		if _, ok := documented[name]; strings.HasPrefix(name, "flashgate_") && !ok {
			tb.Errorf("%s is on the %s's /metrics but not in the metrics table of %s", name, service, doc)
		}
	}
}

// docMetrics reads the metrics table of the doc at path: the metrics documented
// for service, with their types.
func docMetrics(tb testing.TB, path, service string) map[string]string {
	tb.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(tb, err)
	out := map[string]string{}
	for line := range strings.Lines(string(raw)) {
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
	require.NotEmpty(tb, out, "the metrics table of %s lists nothing for %s", path, service)
	return out
}

// RepoFile is the path of rel, a path from the module's root, found by walking
// up from the test's directory to go.mod: tests that read the docs find them
// wherever their package lives.
func RepoFile(tb testing.TB, rel string) string {
	tb.Helper()
	dir, err := os.Getwd()
	require.NoError(tb, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, filepath.FromSlash(rel))
		}
		up := filepath.Dir(dir)
		require.NotEqual(tb, dir, up, "no go.mod above the test's directory")
		dir = up
	}
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
