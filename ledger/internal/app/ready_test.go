package app_test

import (
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/app"
	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
)

// TestReadyFlood: a flood of unauthenticated /readyz probes (50 at a time
// for 2 s) all answer 200, and reach Postgres at most once per readyEvery
// (flashgate_ready_pings_total), not once per probe.
func TestReadyFlood(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{NoRedis: true})
	pings := func() float64 {
		page := ledgertest.Call(t, http.MethodGet, l.URL+api.MetricsPath, "", nil)
		require.Equal(t, http.StatusOK, page.Status)
		m := regexp.MustCompile(`(?m)^flashgate_ready_pings_total (\S+)$`).FindStringSubmatch(page.Raw)
		require.NotNil(t, m, "flashgate_ready_pings_total on /metrics")
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	before := pings()
	began := time.Now()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		probes   int
		statuses = map[int]int{}
	)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(began) < 2*time.Second {
				st := 0
				if resp, err := ledgertest.HTTPClient.Get(l.URL + api.ReadyzPath); err == nil {
					st = resp.StatusCode
					resp.Body.Close()
				}
				mu.Lock()
				probes++
				statuses[st]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	sent := pings() - before
	most := float64(took/app.ReadyEvery) + 2
	t.Logf("%d probes in %s: %v; %v pings to Postgres (at most %v)", probes, took.Round(time.Millisecond), statuses, sent, most)
	assert.Equal(t, probes, statuses[http.StatusOK], "every probe ready: %v", statuses)
	assert.LessOrEqual(t, sent, most, "pings of %d probes in %s", probes, took)
}
