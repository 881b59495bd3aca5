package httpx

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/api"
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

	storm Storm // the log lines of its sheds
	now   func() time.Time
}

// Storm counts the requests of a storm of refusals (shed, window full) and
// says when one should be logged: like every 503 they are, but at most once a
// second, with the count since the line before, so that thousands a second
// do not become thousands of log lines.
type Storm struct {
	mu       sync.Mutex
	lastLog  time.Time
	unlogged uint64
}

// stormLogEvery is how often a storm is logged.
const stormLogEvery = time.Second

// Add counts one refusal at now and reports whether to log it, with the
// refusals since the last line (this one included).
func (st *Storm) Add(now time.Time) (n uint64, log bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.unlogged++
	if now.Sub(st.lastLog) < stormLogEvery {
		return 0, false
	}
	n = st.unlogged
	st.lastLog, st.unlogged = now, 0
	return n, true
}

// neverShed are the routes a full service still answers.
var neverShed = map[string]bool{api.HealthzPath: true, api.ReadyzPath: true, api.MetricsPath: true}

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

// reject answers a shed request, logged as a Storm.
func (s *Shedder) reject(c *gin.Context) {
	s.shed.Add(1)
	c.Header(api.HeaderRetryAfter, api.RetryAfter)
	c.Header(api.HeaderShed, "1")
	c.AbortWithStatusJSON(http.StatusServiceUnavailable, api.ErrorBody{
		Error: voucher.CodeUnavailable, Message: "the service is at its limit of requests in flight; retry shortly",
	})
	n, log := s.storm.Add(s.now())
	if !log {
		return
	}
	LoggerFrom(c).Error("request failed", "request_id", RequestIDFrom(c), "route", c.FullPath(),
		"method", c.Request.Method, "err", "shed: MAX_INFLIGHT requests in flight", "shed", n,
		"max_inflight", cap(s.slots))
}
