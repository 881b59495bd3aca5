package overload

import (
	"cmp"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Shedder bounds the requests a service works on at once (MAX_INFLIGHT). A
// request that finds every slot taken waits for one in a queue, first come
// first served, for at most half of LATENCY_SLO, while the queue does not
// stand (slotQueue); otherwise it is answered 503 UNAVAILABLE with Retry-After
// (1-3 s, SetRetryAfter): past its maximum a service only gets slower for everyone, so the excess is
// better told to come back than queued for long. /healthz, /readyz and
// /metrics are never shed, so that probes and scrapes see the truth. A
// request that the service's spare lets through a full bound (a retry that
// takes nothing new) is worked on all the same, up to MAX_INFLIGHT more at
// once: counted apart, so that it never holds a slot that a request waiting in
// the queue would have had (a retry waiting for its order's write holds its
// place as long as the write takes).
//
// The bound is MAX_INFLIGHT (256 by default); at 0 it moves with what the
// requests take now (inflightLimit), up to MAX_CONNS.
type Shedder struct {
	fixed    int64          // MAX_INFLIGHT; 0: adaptive
	adaptive *inflightLimit // nil: the bound is fixed
	inflight atomic.Int64
	beside   atomic.Int64            // spared requests in flight, beside the slots
	spare    func(*gin.Context) bool // nil: none is spared
	shed     atomic.Uint64           // requests shed since start
	spared   atomic.Uint64           // requests spare let through a full bound
	queue    *slotQueue              // nil: the excess is shed at once

	storm Storm // the log lines of its sheds
	now   func() time.Time
}

// neverShed are the routes a full service still answers.
var neverShed = map[string]bool{api.HealthzPath: true, api.ReadyzPath: true, api.MetricsPath: true}

// NewShedder returns a Shedder letting max requests in at once, or, when max
// is 0, as many as inflightLimit finds answer within LATENCY_SLO, up to
// most; it counts the requests it sheds in flashgate_http_shed_total on reg
// (nil: nowhere).
// slo is LATENCY_SLO: a request over the bound waits for a slot up to half of
// it while the queue does not stand (0: the excess is shed at once). spare,
// when not nil, is asked about a request that finds the bound full, and lets
// it in when it answers true; it must be cheap (it runs for every request the
// bound would queue or shed) and may read the body if it puts it back.
func NewShedder(max, most int, slo time.Duration, spare func(*gin.Context) bool, reg prometheus.Registerer) *Shedder {
	s := &Shedder{fixed: int64(max), spare: spare, now: time.Now}
	if max <= 0 {
		s.adaptive = newInflightLimit(most, cmp.Or(slo, httpx.DefaultLatencySLO), s.now())
	}
	if slo > 0 {
		s.queue = newSlotQueue(slo, s.now)
	}
	if reg != nil {
		registerInflight(reg, s.bound, s.adaptive)
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "flashgate_http_shed_total",
			Help: "Requests answered 503 because MAX_INFLIGHT requests were in flight: at once while the queue for a slot stood, or after waiting half of LATENCY_SLO for one.",
		}, func() float64 { return float64(s.shed.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "flashgate_http_shed_spared_total",
				Help: "Requests let through a full MAX_INFLIGHT because they take nothing new (in the proxy: a retry of an order it answered 201 or is writing, that another proxy named as admitted, or that its sold-out flag knows held its use).",
			}, func() float64 { return float64(s.spared.Load()) }))
		if s.queue != nil {
			s.queue.register(reg)
		}
	}
	return s
}

// Middleware takes a slot for the rest of the chain or sheds the request.
func (s *Shedder) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		if neverShed[c.Request.URL.Path] {
			return
		}
		ok, spared, why := s.enter(c)
		if !ok {
			s.reject(c, why)
			return
		}
		if spared {
			defer s.beside.Add(-1)
			c.Next()
			return
		}
		if s.adaptive == nil {
			defer s.leave()
			c.Next()
			return
		}
		since := s.now()
		defer func() {
			s.leave()
			now := s.now()
			s.adaptive.done(now.Sub(since), now)
		}()
		c.Next()
	}
}

// bound returns the requests let into a slot at once now.
func (s *Shedder) bound() int64 {
	if s.adaptive != nil {
		return s.adaptive.bound()
	}
	return s.fixed
}

// besideMost bounds the spared requests in flight: MAX_INFLIGHT, or the most
// the adaptive bound may reach.
func (s *Shedder) besideMost() int64 {
	if s.adaptive != nil {
		return int64(s.adaptive.most)
	}
	return s.fixed
}

// enter takes a place for c's request: one of the bound's slots; else, when
// spare lets it through, one of besideMost places beside them (spared: the
// memory bound holds at twice MAX_INFLIGHT, what takes nothing new is not
// shed, and it never holds a slot a waiting request could take); else a slot
// freed while it waits in the queue. A request that finds no place takes
// none, so those shed never crowd out those let in. why says why it found none.
func (s *Shedder) enter(c *gin.Context) (ok, spared bool, why string) {
	q := s.queue
	if (q == nil || q.waiting.Load() == 0) && s.take() {
		if q != nil && q.standing.Load() {
			q.idle(s.now())
		}
		return true, false, ""
	}
	if s.adaptive != nil {
		s.adaptive.full()
	}
	if s.spare != nil && s.spare(c) && takeBelow(&s.beside, s.besideMost()) {
		s.spared.Add(1)
		return true, true, ""
	}
	if q == nil {
		return false, false, shedFull
	}
	ok, why = q.wait(c.Request.Context(), s.take)
	return ok, false, why
}

// leave gives a request's slot back, to the queue's first request if one
// waits. The count goes down before the queue is looked at, and a request
// joins the queue before it tries the count again (slotQueue.wait): one of the
// two always sees the other, so no slot is left free while a request waits.
func (s *Shedder) leave() {
	s.inflight.Add(-1)
	if q := s.queue; q != nil && q.waiting.Load() > 0 {
		q.handOver(s.take)
	}
}

// take counts one more request in a slot if fewer than the bound are.
func (s *Shedder) take() bool { return takeBelow(&s.inflight, s.bound()) }

// takeBelow adds one to n if it is below bound.
func takeBelow(n *atomic.Int64, bound int64) bool {
	for {
		v := n.Load()
		if v >= bound {
			return false
		}
		if n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// InFlight returns the requests worked on now, spared ones included.
func (s *Shedder) InFlight() int { return int(s.inflight.Load() + s.beside.Load()) }

// Why a request found no place, as its log line says.
const (
	shedFull     = "shed: MAX_INFLIGHT requests in flight"
	shedStanding = "shed: MAX_INFLIGHT requests in flight and a standing queue for a slot (LATENCY_SLO)"
	shedWaited   = "shed: MAX_INFLIGHT requests in flight for half of LATENCY_SLO while it waited"
)

// reject answers a shed request, logged as a Storm.
func (s *Shedder) reject(c *gin.Context, why string) {
	s.shed.Add(1)
	httpx.SetRetryAfter(c, 0)
	c.Header(api.HeaderShed, "1")
	c.AbortWithStatusJSON(http.StatusServiceUnavailable, api.ErrorBody{
		Error: voucher.CodeUnavailable, Message: "the service is at its limit of requests in flight; retry shortly",
	})
	s.storm.Add(s.now(), httpx.LoggerFrom(c), Refusal{RequestID: httpx.RequestIDFrom(c), Route: c.FullPath(),
		Method: c.Request.Method, Cause: why, Attrs: []any{"max_inflight", s.bound()}})
}
