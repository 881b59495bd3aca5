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
// /metrics are never shed, so that probes and scrapes see the truth. A
// request that the service's spare lets through a full bound (a retry that
// takes nothing new) is worked on all the same, up to twice MAX_INFLIGHT.
type Shedder struct {
	most     int64
	inflight atomic.Int64
	spare    func(*gin.Context) bool // nil: none is spared
	shed     atomic.Uint64           // requests shed since start
	spared   atomic.Uint64           // requests spare let through a full bound

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
// spare, when not nil, is asked about a request that finds the bound full,
// and lets it in when it answers true; it must be cheap (it runs for every
// request the bound would shed) and may read the body if it puts it back.
func NewShedder(max int, spare func(*gin.Context) bool, reg prometheus.Registerer) *Shedder {
	s := &Shedder{most: int64(max), spare: spare, now: time.Now}
	if reg != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "flashgate_http_shed_total",
			Help: "Requests answered 503 at once because MAX_INFLIGHT requests were in flight.",
		}, func() float64 { return float64(s.shed.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "flashgate_http_shed_spared_total",
				Help: "Requests let through a full MAX_INFLIGHT because they take nothing new (a retry of an order this proxy answered 201).",
			}, func() float64 { return float64(s.spared.Load()) }))
	}
	return s
}

// Middleware takes a slot for the rest of the chain or sheds the request.
func (s *Shedder) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		if neverShed[c.Request.URL.Path] {
			return
		}
		if !s.enter(c) {
			s.reject(c)
			return
		}
		defer s.inflight.Add(-1)
		c.Next()
	}
}

// enter takes a place for c's request: one of MAX_INFLIGHT, else, when spare
// lets it through, one of twice MAX_INFLIGHT (the memory bound holds, and
// what takes nothing new is not shed). A request that finds no place takes
// none, so those shed never crowd out those let in.
func (s *Shedder) enter(c *gin.Context) bool {
	if s.take(s.most) {
		return true
	}
	if s.spare == nil || !s.spare(c) || !s.take(2*s.most) {
		return false
	}
	s.spared.Add(1)
	return true
}

// take counts one more request in flight if fewer than bound are.
func (s *Shedder) take(bound int64) bool {
	for {
		n := s.inflight.Load()
		if n >= bound {
			return false
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// InFlight returns the requests worked on now.
func (s *Shedder) InFlight() int { return int(s.inflight.Load()) }

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
		"max_inflight", s.most)
}
