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
// /metrics are never shed, so that probes and scrapes see the truth. With a
// Limit the bound adapts below MAX_INFLIGHT (see Limit); a request that the
// service's Spare lets through a full bound (a retry that takes nothing new)
// is worked on all the same, up to twice MAX_INFLIGHT.
type Shedder struct {
	most     int64
	limit    *Limit // nil: the bound is most
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

// untimedKey marks a request whose time says nothing of a queue (it waits
// for something on purpose): a Limit does not judge by it.
const untimedKey = "httpx.untimed"

// Untimed marks c's request as one that waits on purpose (a standard
// voucher's reserve waits its turn on the voucher's row): the adaptive bound
// is not judged by how long it took.
func Untimed(c *gin.Context) { c.Set(untimedKey, true) }

// NewShedder returns a Shedder letting max requests in at once; it counts
// the requests it sheds in flashgate_http_shed_total on reg (nil: nowhere).
// limit, when not nil, bounds them below max (see Limit); spare, when not
// nil, is asked about a request that finds the bound full, and lets it in
// when it answers true.
func NewShedder(max int, limit *Limit, spare func(*gin.Context) bool, reg prometheus.Registerer) *Shedder {
	s := &Shedder{most: int64(max), limit: limit, spare: spare, now: time.Now}
	if reg != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "flashgate_http_shed_total",
			Help: "Requests answered 503 at once because the requests in flight were at their bound (MAX_INFLIGHT, or the adaptive bound below it).",
		}, func() float64 { return float64(s.shed.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "flashgate_http_inflight_limit",
				Help: "The bound on requests in flight now: MAX_INFLIGHT, or below it the adaptive bound (LATENCY_SLO).",
			}, func() float64 { return float64(s.bound()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "flashgate_http_shed_spared_total",
				Help: "Requests let through a full bound because they take nothing new (a retry of an order that holds its use).",
			}, func() float64 { return float64(s.spared.Load()) }))
	}
	return s
}

// bound is the number of requests let in at once now.
func (s *Shedder) bound() int64 {
	if s.limit == nil {
		return s.most
	}
	return min(s.most, int64(s.limit.Current()))
}

// Middleware takes a place for the rest of the chain or sheds the request.
func (s *Shedder) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		if neverShed[c.Request.URL.Path] {
			return
		}
		if n := s.inflight.Add(1); n > s.bound() {
			// A spared request may pass MAX_INFLIGHT, up to twice it: the
			// memory bound holds, and what takes nothing new is not shed.
			if n > 2*s.most || s.spare == nil || !s.spare(c) {
				s.inflight.Add(-1)
				s.reject(c)
				return
			}
			s.spared.Add(1)
		}
		defer s.inflight.Add(-1)
		start := time.Now()
		c.Next()
		// Every answer is timed, 503s included: a controller's own refusal
		// (a window, a breaker) is fast while the service keeps up and
		// leaves the median fast, but one that waited for a CPU, a timeout
		// or a dead ledger is the queue the bound is there to cut.
		if s.limit != nil && !c.GetBool(untimedKey) {
			s.limit.Done(time.Since(start))
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
		"max_inflight", s.most, "bound", s.bound())
}
