package overload

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/httpx"
)

// TestShedderQueuesWhatASlotWillTake: a burst of many times MAX_INFLIGHT
// requests, each holding its slot briefly, is all answered by the handler and
// none shed (the queue drains well within its wait), and never more than
// MAX_INFLIGHT run at once: slots handed over in the queue are neither lost
// (a waiter left behind a free slot would be shed after its wait) nor doubled.
func TestShedderQueuesWhatASlotWillTake(t *testing.T) {
	const max, requests = 8, 400
	var running, most atomic.Int64
	r := testEngine(testConfig{Log: slog.New(slog.DiscardHandler), Metrics: httpx.NewMetrics("test"), MaxInflight: max,
		LatencySLO: 20 * time.Second, Ready: func(*gin.Context) error { return nil }})
	r.GET("/work", func(c *gin.Context) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		c.Status(http.StatusOK)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: requests}}

	count := statusCounts(t, requests, func(int) (*http.Response, error) { return client.Get(srv.URL + "/work") })
	require.Equal(t, map[int]int{http.StatusOK: requests}, count)
	assert.LessOrEqual(t, most.Load(), int64(max), "requests run at once")
	assert.Equal(t, int64(max), most.Load(), "the bound was reached: the burst queued")
}

// TestShedderShedsWhatWaitedHalfTheSLO: with every slot held, a request waits
// half of LATENCY_SLO and is then shed 503 with Retry-After; the slots' own
// requests get their answers, and a request after them is let in.
func TestShedderShedsWhatWaitedHalfTheSLO(t *testing.T) {
	const max = 4
	release := make(chan struct{})
	entered := make(chan struct{}, max)
	r := testEngine(testConfig{Log: slog.New(slog.DiscardHandler), Metrics: httpx.NewMetrics("test"), MaxInflight: max,
		LatencySLO: 200 * time.Millisecond, Ready: func(*gin.Context) error { return nil }})
	r.GET("/slow", func(c *gin.Context) {
		entered <- struct{}{}
		<-release
		c.Status(http.StatusOK)
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	var once sync.Once
	defer once.Do(func() { close(release) })
	held := make(chan int, max)
	for range max {
		go func() { held <- getStatus(t, srv.URL+"/slow") }()
	}
	for range max {
		<-entered
	}
	start := time.Now()
	resp, err := http.Get(srv.URL + "/slow")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "it waited half the SLO for a slot")
	once.Do(func() { close(release) })
	for range max {
		require.Equal(t, http.StatusOK, <-held)
	}
	go func() { <-entered }()
	require.Equal(t, http.StatusOK, getStatus(t, srv.URL+"/slow"))
}

// TestSlotQueueCoDel drives the queue's rule on a clock of its own: waits
// over the target for less than an interval are a passing queue; for a whole
// interval, a standing one, and the next request over the bound is shed at
// once without queueing; a wait within the target in between starts over;
// free slots for an interval with none shed end the standing queue.
func TestSlotQueueCoDel(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	q := newSlotQueue(100*time.Millisecond, clock) // wait 50ms, target 25ms, interval 100ms
	full := func() bool { return false }
	step := func(d time.Duration) { now = now.Add(d) }

	q.observe(30*time.Millisecond, now) // over target: the clock starts
	step(60 * time.Millisecond)
	q.observe(40*time.Millisecond, now)
	require.False(t, q.dropping, "over target for 60ms of a 100ms interval: a passing queue")
	q.observe(10*time.Millisecond, now) // within: starts over
	step(60 * time.Millisecond)
	q.observe(40*time.Millisecond, now)
	require.False(t, q.dropping, "the interval starts over after a wait within the target")
	require.True(t, q.standing.Load())
	step(100 * time.Millisecond)
	q.observe(40*time.Millisecond, now)
	require.True(t, q.dropping, "over target for a whole interval: a standing queue")

	ok, why := q.wait(context.Background(), full)
	require.False(t, ok)
	require.Equal(t, shedStanding, why, "shed at once, not queued")
	require.Zero(t, q.waiting.Load())

	step(50 * time.Millisecond)
	q.idle(now)
	require.True(t, q.dropping, "a free slot 50ms after the last shed: still standing")
	step(100 * time.Millisecond)
	q.idle(now)
	require.False(t, q.dropping, "free slots for an interval with none shed: no longer standing")
	require.False(t, q.standing.Load())
}

// TestSlotQueueLetsLeaversGo: a waiter whose client left is taken out of the
// queue and takes no slot.
func TestSlotQueueLetsLeaversGo(t *testing.T) {
	q := newSlotQueue(time.Hour, time.Now)
	full := func() bool { return false }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool, 2)
	for range 2 {
		go func() { ok, _ := q.wait(ctx, full); done <- ok }()
	}
	require.Eventually(t, func() bool { return q.waiting.Load() == 2 }, 5*time.Second, time.Millisecond)
	cancel()
	require.False(t, <-done)
	require.False(t, <-done)
	require.Zero(t, q.waiting.Load())
	require.Zero(t, q.waiters.Len())
}
