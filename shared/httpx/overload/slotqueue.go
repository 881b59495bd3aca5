package overload

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// slotQueue holds the requests that found every MAX_INFLIGHT slot taken, first
// come first served, until a slot frees or they waited half of LATENCY_SLO.
// It sheds on a standing queue, not on a count, with CoDel's rule (Nichols and
// Jacobson, "Controlling Queue Delay"): a queue that a burst made drains within
// an interval, and one that arrivals beyond what the service can do made does
// not. So when every request that left the queue for an interval (LATENCY_SLO)
// had waited longer than the target (a quarter of it), the queue stands: it
// goes dropping, and a request that finds the slots full is shed at once
// instead of queued, as it would be with no queue. It stops dropping once the
// slots kept up (a request found one free, no queue before it) for a whole
// interval with no request shed.
//
// Nothing in it is a figure of one machine: a slower machine or a slower
// dependency makes requests hold their slots longer, so more of them queue, but
// they are shed only when the queue stands, that is when more arrive than the
// service answers. What waits is bounded: MAX_INFLIGHT requests in their slots,
// the others for at most half the SLO each, one per client connection at most
// (MAX_CONNS); while a dependency hangs, the queue stands within an interval
// and a half of its first wait, and sheds at once.
type slotQueue struct {
	longest  time.Duration // the longest a request waits for a slot (LATENCY_SLO / 2)
	target   time.Duration // a wait above this is a queue (LATENCY_SLO / 4)
	interval time.Duration // for this long above target: a standing queue (LATENCY_SLO)
	now      func() time.Time

	waiting  atomic.Int64 // requests in the queue, read by every leave without mu
	standing atomic.Bool  // dropping, or a wait over the target seen: the fast path tells idle()

	mu         sync.Mutex
	waiters    list.List // of *waiter, first come first
	firstAbove time.Time // when the waits over target make a standing queue; zero: the last was within it
	dropping   bool
	lastShed   time.Time // the last request shed while dropping

	waited     prometheus.Histogram // nil until registered
	dropStarts atomic.Uint64
}

// waiter is one request in the queue; ready is closed once it holds a slot.
type waiter struct {
	ready chan struct{}
	since time.Time
	at    *list.Element // its place in waiters; nil once handed a slot or gone
}

func newSlotQueue(slo time.Duration, now func() time.Time) *slotQueue {
	return &slotQueue{longest: slo / 2, target: slo / 4, interval: slo, now: now}
}

// register adds the queue's metrics to reg.
func (q *slotQueue) register(reg prometheus.Registerer) {
	q.waited = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flashgate_http_queue_wait_seconds",
		Help:    "How long requests that found MAX_INFLIGHT slots taken waited in the queue for one (those let in and those shed after half of LATENCY_SLO).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25},
	})
	reg.MustRegister(q.waited,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "flashgate_http_queue_standing",
			Help: "1 while the queue for a MAX_INFLIGHT slot stands (CoDel: every wait over an interval above the target) and requests over the bound are shed at once; else 0.",
		}, func() float64 {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.dropping {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "flashgate_http_queue_standing_total",
			Help: "Times the queue for a MAX_INFLIGHT slot was found standing and began shedding at once.",
		}, func() float64 { return float64(q.dropStarts.Load()) }))
}

// wait queues a request that found the slots full until take gets it one
// (handOver), it waited q.wait, or ctx ends. ok: it holds a slot.
func (q *slotQueue) wait(ctx context.Context, take func() bool) (ok bool, why string) {
	now := q.now()
	q.mu.Lock()
	if q.dropping {
		q.lastShed = now
		q.mu.Unlock()
		return false, shedStanding
	}
	// Counted as waiting before it tries the count again: a leave that
	// missed it sees it (Shedder.leave).
	q.waiting.Add(1)
	if take() {
		q.waiting.Add(-1)
		q.mu.Unlock()
		return true, ""
	}
	w := &waiter{ready: make(chan struct{}), since: now}
	w.at = q.waiters.PushBack(w)
	q.mu.Unlock()

	timer := time.NewTimer(q.longest)
	defer timer.Stop()
	timedOut := false
	select {
	case <-w.ready:
		return true, ""
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.remove(w) { // a slot was handed to it meanwhile
		return true, ""
	}
	q.waiting.Add(-1)
	if timedOut {
		now := q.now()
		q.observe(now.Sub(w.since), now)
	}
	return false, shedWaited
}

// handOver gives freed slots to the queue's first requests, as many as take
// gets.
func (q *slotQueue) handOver(take func() bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.waiters.Len() > 0 && take() {
		w := q.waiters.Remove(q.waiters.Front()).(*waiter)
		w.at = nil
		q.waiting.Add(-1)
		now := q.now()
		q.observe(now.Sub(w.since), now)
		close(w.ready)
	}
}

// remove takes w out of the queue, in constant time whatever its length;
// false: it was not in it (handed a slot).
func (q *slotQueue) remove(w *waiter) bool {
	if w.at == nil {
		return false
	}
	q.waiters.Remove(w.at)
	w.at = nil
	return true
}

// observe judges one request's wait (CoDel): within the target, the queue
// does not stand; over it for a whole interval, it does.
func (q *slotQueue) observe(waited time.Duration, now time.Time) {
	if q.waited != nil {
		q.waited.Observe(waited.Seconds())
	}
	switch {
	case waited <= q.target:
		q.firstAbove = time.Time{}
	case q.firstAbove.IsZero():
		q.firstAbove = now.Add(q.interval)
	case !now.Before(q.firstAbove) && !q.dropping:
		q.dropping, q.lastShed = true, now
		q.dropStarts.Add(1)
	}
	q.standing.Store(q.dropping || !q.firstAbove.IsZero())
}

// idle is told that a request found a slot free and no queue before it: no
// wait at all. A dropping queue stops once none was shed for an interval.
func (q *slotQueue) idle(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.firstAbove = time.Time{}
	if q.dropping && now.Sub(q.lastShed) >= q.interval {
		q.dropping = false
	}
	q.standing.Store(q.dropping)
}
