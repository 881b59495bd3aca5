package httpx

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// TestShedderBoundsInFlight fills every slot with requests that block, then
// checks that each request over the bound is answered 503 with Retry-After at
// once (many goroutines, exact counts), that health, readiness and metrics are
// still answered, that the storm leaves one log line, and that the held
// requests finish with their own answer.
func TestShedderBoundsInFlight(t *testing.T) {
	const max, extra = 8, 200
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&logs, &logMu}, nil))
	release := make(chan struct{})
	entered := make(chan struct{}, max)
	r := NewServiceEngine(Service{Log: log, Metrics: NewMetrics("test"), MaxInflight: max,
		Ready: func(*gin.Context) error { return nil }})
	r.GET("/slow", func(c *gin.Context) {
		entered <- struct{}{}
		<-release
		c.Status(http.StatusOK)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	held := make(chan int, max)
	for range max {
		go func() { held <- getStatus(t, srv.URL+"/slow") }()
	}
	for range max {
		<-entered
	}

	var wg sync.WaitGroup
	statuses := make(chan int, extra)
	retryAfter := make(chan string, extra)
	start := time.Now()
	for range extra {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL + "/slow")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
			retryAfter <- resp.Header.Get(api.HeaderRetryAfter)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(statuses)
	close(retryAfter)
	shed := 0
	for st := range statuses {
		if st == http.StatusServiceUnavailable {
			shed++
		}
	}
	require.Equal(t, extra, shed, "requests over MAX_INFLIGHT answered 503")
	for ra := range retryAfter {
		require.Equal(t, api.RetryAfter, ra)
	}
	t.Logf("%d requests shed in %v", extra, elapsed)

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		require.Equal(t, http.StatusOK, getStatus(t, srv.URL+path), "GET %s while full", path)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	require.Contains(t, body.String(), "flashgate_http_shed_total 200")

	close(release)
	for range max {
		require.Equal(t, http.StatusOK, <-held, "a request holding a slot gets its own answer")
	}
	logMu.Lock()
	lines := strings.Count(logs.String(), `"shed":`)
	logMu.Unlock()
	require.Equal(t, 1, lines, "a storm of %d sheds within a second is logged once:\n%s", extra, logs.String())
	require.Equal(t, http.StatusOK, getStatus(t, srv.URL+"/healthz"))
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
