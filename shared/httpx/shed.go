package httpx

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Shedder bounds the requests a service works on at once (MAX_INFLIGHT). A
// request over the bound is answered 503 UNAVAILABLE with Retry-After at
// once: past its maximum a service only gets slower for everyone, so the
// excess is better told to come back than queued. /healthz, /readyz and
// /metrics are never shed, so that probes and scrapes see the truth.
type Shedder struct {
	slots chan struct{}
	shed  atomic.Uint64 // requests shed since start

	mu       sync.Mutex
	lastLog  time.Time
	unlogged uint64 // shed since the last log line
	now      func() time.Time
}

// shedLogEvery is how often a shed storm is logged: one line per interval,
// with the number of requests shed since the line before.
const shedLogEvery = time.Second

// neverShed are the routes a full service still answers.
var neverShed = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// NewShedder returns a Shedder letting max requests in at once; it counts
// the requests it sheds in flashgate_http_shed_total on reg (nil: nowhere).
func NewShedder(max int, reg prometheus.Registerer) *Shedder {
	s := &Shedder{slots: make(chan struct{}, max), now: time.Now}
	if reg != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "flashgate_http_shed_total",
			Help: "Requests answered 503 at once because MAX_INFLIGHT requests were in flight.",
		}, func() float64 { return float64(s.shed.Load()) }))
	}
	return s
}

// Middleware takes a slot for the rest of the chain or sheds the request.
func (s *Shedder) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		if neverShed[c.Request.URL.Path] {
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.reject(c)
			return
		}
		defer func() { <-s.slots }()
		c.Next()
	}
}

// InFlight returns the requests holding a slot now.
func (s *Shedder) InFlight() int { return len(s.slots) }

// reject answers a shed request. Like every 503 it is logged, but at most
// once per shedLogEvery with the count since the last line: a storm of
// thousands of sheds a second must not become thousands of log lines.
func (s *Shedder) reject(c *gin.Context) {
	s.shed.Add(1)
	c.Header("Retry-After", RetryAfter)
	c.AbortWithStatusJSON(http.StatusServiceUnavailable, ErrorBody{
		Error: voucher.CodeUnavailable, Message: "the service is at its limit of requests in flight; retry shortly",
	})
	s.mu.Lock()
	s.unlogged++
	now := s.now()
	if now.Sub(s.lastLog) < shedLogEvery {
		s.mu.Unlock()
		return
	}
	n := s.unlogged
	s.lastLog, s.unlogged = now, 0
	s.mu.Unlock()
	LoggerFrom(c).Error("request failed", "request_id", RequestIDFrom(c), "route", c.FullPath(),
		"method", c.Request.Method, "err", "shed: MAX_INFLIGHT requests in flight", "shed", n,
		"max_inflight", cap(s.slots))
}
