package overload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/decode"
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
	r := testEngine(testConfig{Log: log, Metrics: httpx.NewMetrics("test"), MaxInflight: max,
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
	spread := map[string]int{}
	for ra := range retryAfter {
		require.Contains(t, []string{"1", "2", "3"}, ra)
		spread[ra]++
	}
	require.Len(t, spread, 3, "Retry-After drawn per answer over 1-3 s: %v", spread)
	t.Logf("%d requests shed in %v", extra, elapsed)

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		require.Equal(t, http.StatusOK, getStatus(t, srv.URL+path), "GET %s while full", path)
	}
	require.Contains(t, getBody(t, srv.URL+"/metrics"), "flashgate_http_shed_total 200")

	close(release)
	for range max {
		require.Equal(t, http.StatusOK, <-held, "a request holding a slot gets its own answer")
	}
	// The storm is logged at once and then at most once a second, each shed
	// counted in one WARN line: the first at once, the rest when their
	// second is over.
	var lines []stormLogLine
	require.Eventually(t, func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		lines = stormLines(t, logs.String())
		n := uint64(0)
		for _, l := range lines {
			n += l.Shed
		}
		return n == extra
	}, 3*time.Second, 50*time.Millisecond, "every shed counted in a line")
	require.LessOrEqual(t, len(lines), 2+int(elapsed/time.Second), "a storm of %d sheds logged at most once a second: %+v", extra, lines)
	for _, l := range lines {
		require.Equal(t, "WARN", l.Level, "%+v", l)
		require.Equal(t, "requests shed", l.Msg, "%+v", l)
		require.NotEmpty(t, l.RequestID, "a sample request id: %+v", l)
		require.Equal(t, map[string]uint64{shedFull: l.Shed}, l.Causes, "%+v", l)
		require.Equal(t, shedFull, l.Err, "%+v", l)
	}
	require.Equal(t, http.StatusOK, getStatus(t, srv.URL+"/healthz"))
}

// statusCounts sends n requests at once, request i by send(i), and counts
// their answers by status.
func statusCounts(t *testing.T, n int, send func(i int) (*http.Response, error)) map[int]int {
	t.Helper()
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := send(i)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for st := range statuses {
		count[st]++
	}
	return count
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

// stormLogLine is a Storm's JSON log line.
type stormLogLine struct {
	Level, Msg string
	Shed       uint64
	Causes     map[string]uint64
	RequestID  string `json:"request_id"`
	Err        string
}

// stormLines decodes the storm lines of a JSON log.
func stormLines(t *testing.T, log string) []stormLogLine {
	t.Helper()
	var lines []stormLogLine
	for _, raw := range strings.Split(strings.TrimSpace(log), "\n") {
		if !strings.Contains(raw, `"shed":`) {
			continue
		}
		var l stormLogLine
		require.NoError(t, json.Unmarshal([]byte(raw), &l), raw)
		lines = append(lines, l)
	}
	return lines
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

// TestShedderSparesWhatTakesNothingNew: with every place taken, the requests
// Spare answers true for are worked on (many goroutines, exact counts) and
// read the body Spare peeked at, the others are shed; MAX_INFLIGHT itself is
// passed by more than itself: a spared request is counted in flight.
func TestShedderSparesWhatTakesNothingNew(t *testing.T) {
	const max, spared, shed = 128, 50, 70 // max + spared + shed within 2 x max: none is shed for being past twice the bound
	release := make(chan struct{})
	entered := make(chan struct{}, max)
	var bodies sync.Map
	r := testEngine(testConfig{Log: slog.New(slog.DiscardHandler), Metrics: httpx.NewMetrics("test"), MaxInflight: max,
		Spare: func(c *gin.Context) bool {
			cl, ok := decode.PeekClaim(c)
			return ok && cl.CustomerID == 7
		},
		Ready: func(*gin.Context) error { return nil }})
	r.GET("/slow", func(c *gin.Context) {
		entered <- struct{}{}
		<-release
		c.Status(http.StatusOK)
	})
	r.POST("/reserve", func(c *gin.Context) {
		cl, err := decode.BindClaim(c)
		if err != nil {
			httpx.WriteError(c, err)
			return
		}
		bodies.Store(cl.OrderID, cl.CustomerID)
		c.Status(http.StatusCreated)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	var once sync.Once
	defer once.Do(func() { close(release) }) // before Close, even when a check fails
	held := make(chan int, max)
	for range max {
		go func() { held <- getStatus(t, srv.URL+"/slow") }()
	}
	for range max {
		<-entered
	}

	count := statusCounts(t, spared+shed, func(i int) (*http.Response, error) {
		customer := 7 // spared
		if i >= spared {
			customer = 8
		}
		body := fmt.Sprintf(`{"customerId":%d,"orderId":"o-%d","orderAmount":100}`, customer, i)
		return http.Post(srv.URL+"/reserve", "application/json", strings.NewReader(body))
	})
	require.Equal(t, map[int]int{http.StatusCreated: spared, http.StatusServiceUnavailable: shed}, count)
	n := 0
	bodies.Range(func(_, customer any) bool {
		require.EqualValues(t, 7, customer, "the handler read the body spare peeked at")
		n++
		return true
	})
	require.Equal(t, spared, n)
	once.Do(func() { close(release) })
	for range max {
		require.Equal(t, http.StatusOK, <-held)
	}
}

// TestSparedRequestsTakeNoWaitersSlot: spared requests are counted beside
// the slots, so a slot a request leaves goes to the request waiting in the
// queue, however many spared ones are still in flight (a retry waiting for
// its order's write holds its place as long as the write takes).
func TestSparedRequestsTakeNoWaitersSlot(t *testing.T) {
	const max = 2
	sh := NewShedder(max, 0, 2*time.Second, func(c *gin.Context) bool {
		cl, ok := decode.PeekClaim(c)
		return ok && cl.CustomerID == 7
	}, nil)
	r := gin.New()
	r.Use(sh.Middleware())
	slowDone, sparedDone := make(chan struct{}, max), make(chan struct{})
	entered := make(chan struct{}, 2*max)
	r.GET("/slow", func(c *gin.Context) { entered <- struct{}{}; <-slowDone; c.Status(http.StatusOK) })
	r.GET("/fast", func(c *gin.Context) { c.Status(http.StatusOK) })
	r.POST("/reserve", func(c *gin.Context) { entered <- struct{}{}; <-sparedDone; c.Status(http.StatusCreated) })
	srv := httptest.NewServer(r)
	defer srv.Close()
	defer close(sparedDone)

	held := make(chan int, 2*max)
	for range max { // every slot taken
		go func() { held <- getStatus(t, srv.URL+"/slow") }()
	}
	for range max {
		<-entered
	}
	for i := range max { // as many spared requests, in flight beside them
		go func() {
			resp, err := http.Post(srv.URL+"/reserve", "application/json",
				strings.NewReader(fmt.Sprintf(`{"customerId":7,"orderId":"o-%d","orderAmount":100}`, i)))
			if err != nil {
				t.Error(err)
				held <- 0
				return
			}
			resp.Body.Close()
			held <- resp.StatusCode
		}()
	}
	for range max {
		<-entered
	}
	require.Equal(t, 2*max, sh.InFlight())

	waiter := make(chan int, 1)
	go func() { waiter <- getStatus(t, srv.URL+"/fast") }()
	require.Eventually(t, func() bool { return sh.queue.waiting.Load() == 1 }, 5*time.Second, time.Millisecond, "the request waits for a slot")
	slowDone <- struct{}{} // one slot free: the waiter's, the spared ones still in flight
	assert.Equal(t, http.StatusOK, <-waiter, "the freed slot went to the waiting request")
	slowDone <- struct{}{}
	sparedDone <- struct{}{}
	sparedDone <- struct{}{}
	for range 2 * max {
		assert.Contains(t, []int{http.StatusOK, http.StatusCreated}, <-held)
	}
	assert.Equal(t, 0, sh.InFlight())
}

// testConfig is what testEngine takes: service.Config's fields that shedding
// reads (service sits above this package, so its tests cannot import it).
type testConfig struct {
	Log                      *slog.Logger
	Metrics                  *httpx.Metrics
	MaxInflight, InflightCap int
	LatencySLO               time.Duration
	Spare                    func(*gin.Context) bool
	Ready                    func(*gin.Context) error
}

// testEngine builds the chain service.NewEngine does, as far as shedding
// goes: metrics and /metrics, request ids, the shedder, /healthz and /readyz.
func testEngine(s testConfig) *gin.Engine {
	r := httpx.NewEngine(s.Log)
	r.Use(s.Metrics.Middleware())
	s.Metrics.ServeMetrics(r)
	r.Use(httpx.RequestID())
	r.Use(NewShedder(s.MaxInflight, s.InflightCap, s.LatencySLO, s.Spare, s.Metrics.Registry).Middleware())
	httpx.Health(r, s.Ready)
	return r
}
