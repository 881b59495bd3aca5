package overload

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/httpx"
)

// inflightLimit sizes the bound on requests in flight when MAX_INFLIGHT is 0,
// from what the service's requests take now. By
// Little's law the requests in flight are the rate times the time each takes:
// a slower machine, a longer network or a batch's round trip make each request
// hold its slot longer at the same rate, and a fixed count then queues and
// sheds good traffic that would have been answered within the SLO.
//
// Every judging interval (a quarter of LATENCY_SLO, once at least
// inflightSamples requests finished in it), the mean time the finished
// requests held their slots (each counted at most inflightClip targets, so
// that an export or a standard reserve waiting for its voucher on purpose does
// not move it alone) is set against the target, half of LATENCY_SLO, and, when
// a request found the bound full in the interval, the bound moves by the
// gradient target/mean, as Netflix's concurrency-limits and Envoy's adaptive
// concurrency filter move theirs:
//   - mean within the target: it grows by target/mean, at most doubling: the
//     answers would still come within the SLO, so nothing waits or is shed
//     for a count;
//   - mean above it: it shrinks by target/mean, at most by half, but never
//     below where it starts (httpx.InflightStart).
//
// A growth is a probe: once the requests it let in had time to finish (two
// mean held times, at least an interval), the answers per second must have
// risen by half as much as the bound did, else it is undone and none is tried
// for two LATENCY_SLOs. On a machine whose CPUs are the limit, more let in
// answer no more, and each answer later, and the time in a slot does not show
// it: the wait for a CPU comes before the slot (accept, read, decode), and
// the mean held time stayed within the target while a 3x overload's answers
// took 0.8 s (bin/loadtest chaos --scenario overload, its bound grown to
// 3,773 before this rule).
//
// A bound not reached in an interval moves a tenth of the way back to where it
// starts: one grown for a burst does not hold more requests on the next fault
// than it did before the burst.
//
// Why it never shrinks below its start: their rule compares with the least
// latency seen, and shrinks whenever answers slow down. A sale's first writes
// are slow (20-100 ms against 1 ms for an answer from Redis alone) while their
// queue passes within the first second, and a smaller bound only makes their
// batches smaller and sheds them. Measured on a 2-core VM
// (bin/loadtest demo --stats-wait 0, loadtest/BENCHMARKS.md): a bound that
// shrank on the mean alone answered 1,011 and 342 of 20,000 requests 503
// where the fixed 256 answered none, and one that shrank only while the slot
// queue stood shrank to 91 and answered 1,695 503. More arrivals than the
// service answers are shed by the slot queue's standing wait (CoDel), which
// needs no count.
//
// It is not the default: on a 2-core VM, where the CPUs are the limit, the
// probes themselves cost the demo's first second with 0.5 ms a hop
// (341-811 x 503 in five runs against 0-952 with the fixed 256, README).
// Where requests wait rather than compute, it answers what 256 sheds
// (TestAdaptiveBoundAdmitsTimelyRequests).
type inflightLimit struct {
	most   float64
	rest   float64       // where it starts, its least, and where it drifts back to when not reached
	target time.Duration // the mean held time aimed for: LATENCY_SLO / 2
	every  time.Duration // a judging interval: LATENCY_SLO / 4

	cur     atomic.Int64 // the bound in force, read by every request
	limited atomic.Bool  // a request found the bound full in this interval

	mu    sync.Mutex
	limit float64
	start time.Time     // of the interval being measured
	sum   time.Duration // held times (clipped) of the requests finished in it
	n     int

	// A growth is a probe: it must raise the answers per second, judged once
	// the requests it let in had time to finish (probeDue), else it is undone
	// and none is tried for inflightProbeWait.
	probeFrom float64   // the bound before the growth under judgement; 0: none
	probeRate float64   // answers per second before it
	probeGain float64   // the share of the growth the answers must rise by
	probeDue  time.Time // when it is judged
	holdOff   time.Time // no growth before this (a probe failed)

	grown, shrunk atomic.Uint64
}

const (
	inflightSamples = 8  // finished requests an interval needs before it is judged
	inflightClip    = 4  // a held time counts at most this many targets
	inflightGrowMax = 2  // per interval
	inflightCutMax  = .5 // per interval
	inflightReturn  = .1 // of the way back to the start, per interval the bound was not reached
	// inflightProbePay is the share of a growth the answers per second must
	// rise by for it to stay: a bound grown by half must bring a quarter more.
	inflightProbePay = .5
	// inflightProbeWait is how many judging intervals pass after a failed
	// probe before the next (LATENCY_SLO x 2).
	inflightProbeWait = 8
)

func newInflightLimit(most int, slo time.Duration, now time.Time) *inflightLimit {
	l := &inflightLimit{most: float64(max(most, 1)), target: slo / 2, every: slo / 4, start: now}
	l.rest = min(httpx.InflightStart, l.most)
	l.limit = l.rest
	l.cur.Store(int64(l.limit))
	return l
}

// bound returns the requests let in at once now.
func (l *inflightLimit) bound() int64 { return l.cur.Load() }

// full is told that a request found the bound full.
func (l *inflightLimit) full() {
	if !l.limited.Load() {
		l.limited.Store(true)
	}
}

// done is told that a request held its slot for held, and judges the
// interval when it is over.
func (l *inflightLimit) done(held time.Duration, now time.Time) {
	held = min(held, inflightClip*l.target)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sum += held
	l.n++
	if l.n < inflightSamples || now.Sub(l.start) < l.every {
		return
	}
	mean := l.sum / time.Duration(l.n)
	rate := float64(l.n) / now.Sub(l.start).Seconds()
	gradient := float64(l.target) / float64(max(mean, time.Microsecond))
	probing, undone := l.probeFrom > 0, false
	if probing && !now.Before(l.probeDue) {
		probing = false
		if rate < l.probeRate*(1+l.probeGain) {
			// More let in answered no more: the service is at what it can
			// do (its CPUs, not a wait), and more in flight only makes each
			// answer later, which the time in a slot does not show (the wait
			// for a CPU before it). Back to what it was.
			l.limit, undone = l.probeFrom, true
			l.holdOff = now.Add(inflightProbeWait * l.every)
			l.shrunk.Add(1)
		}
		l.probeFrom = 0
	}
	switch {
	case probing, undone:
	case !l.limited.Load():
		l.limit += (l.rest - l.limit) * inflightReturn
		if math.Abs(l.rest-l.limit) < 1 {
			l.limit = l.rest
		}
	case mean < l.target:
		if now.Before(l.holdOff) || l.limit >= l.most {
			break
		}
		grown := min(l.most, l.limit*min(inflightGrowMax, gradient))
		l.probeFrom, l.probeRate = l.limit, rate
		l.probeGain = (grown/l.limit - 1) * inflightProbePay
		l.probeDue = now.Add(max(l.every, 2*mean))
		l.limit = grown
		l.grown.Add(1)
	case mean > l.target && l.limit > l.rest:
		l.limit = max(l.rest, l.limit*max(inflightCutMax, gradient))
		l.shrunk.Add(1)
	}
	l.cur.Store(int64(l.limit))
	l.limited.Store(false)
	l.start, l.sum, l.n = now, 0, 0
}

// registerInflight adds the bound in force and, when it sizes itself (l not
// nil), its moves to reg.
func registerInflight(reg prometheus.Registerer, bound func() int64, l *inflightLimit) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flashgate_http_inflight_limit",
		Help: "The requests worked on at once now: MAX_INFLIGHT when set; else the bound moved every quarter of LATENCY_SLO by the mean time requests held their slots against half of LATENCY_SLO.",
	}, func() float64 { return float64(bound()) }))
	grown, shrunk := new(atomic.Uint64), new(atomic.Uint64) // 0 with a fixed bound
	if l != nil {
		grown, shrunk = &l.grown, &l.shrunk
	}
	for _, m := range []struct {
		way string
		n   *atomic.Uint64
	}{{"grow", grown}, {"shrink", shrunk}} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "flashgate_http_inflight_limit_moves_total",
			Help:        "Times the self-sized bound on requests in flight (MAX_INFLIGHT 0) grew (requests found it full and held their slots less than half of LATENCY_SLO on average) or shrank back toward its start (they found it full and held them longer); 0 with MAX_INFLIGHT set.",
			ConstLabels: prometheus.Labels{"way": m.way},
		}, func() float64 { return float64(m.n.Load()) }))
	}
}
