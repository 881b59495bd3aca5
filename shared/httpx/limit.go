package httpx

import (
	"sync"
	"sync/atomic"
	"time"
)

// Limit is the Shedder's adaptive bound on the requests a service works on
// at once. MAX_INFLIGHT is its most (a memory bound, not a speed); below it
// the bound follows what the service measures, not one machine's figures:
//
//   - it shrinks only on a standing queue that breaks the SLO: in an
//     interval of 100 ms, more than 1% of the answers took longer than the
//     SLO (the interval's p99 is above it) and most of them (the median)
//     took more than a quarter of it, for limitStanding intervals in a row.
//     A few slow answers among quick ones are requests that wait for
//     something of their own; a queue is what most requests wait in. The
//     median, not the fastest answer as CoDel takes it: a proxy's answers
//     mix paths (a cached 409 beside a written 201), and one answer that
//     missed the queue would hide it from everyone else. It is then set by
//     Little's law to the most answers per second the service gave in an
//     interval of the last 10 to 20 s times the SLO: the concurrency at
//     which, at the rate the service has shown it keeps, an answer still
//     comes within the SLO;
//   - it grows back by a quarter (at least 1) after an interval with no
//     answer over the SLO.
//
// So a slow machine whose answers still come within the SLO is never shed,
// however long they take in absolute terms; an overload (arrivals above what
// the service answers) is bounded to the SLO.
type Limit struct {
	slo         time.Duration
	least, most int64
	every       time.Duration
	now         func() time.Time
	cur         atomic.Int64

	mu               sync.Mutex
	start            time.Time
	n, late, waiting int64 // answers of the interval, those over the SLO, those over slo/limitQueued
	over             int   // intervals in a row that broke the SLO with a standing queue

	// peak is the most answers per second of an interval in this epoch and
	// the last: what the service has shown it can do, now.
	peak  [2]float64
	epoch time.Time
}

const (
	limitEvery = 100 * time.Millisecond
	// limitLeast is the least the bound shrinks to: a few requests per core
	// keep a service that waits on its dependencies busy.
	limitLeast = 16
	// limitQueued: the median answer of an interval over slo/limitQueued
	// means a standing queue.
	limitQueued = 4
	// limitStanding is how many intervals in a row a standing queue must
	// break the SLO before the bound shrinks: a sale's first moment (every
	// admitted claim waiting for its write while the stock goes, a few
	// hundred milliseconds) passes; an overload, which stays, does not.
	limitStanding = 3
	// limitPeakEvery: the peak rate forgets intervals older than two of these.
	limitPeakEvery = 10 * time.Second
)

// NewLimit returns a Limit that starts at most and sheds toward slo.
func NewLimit(most int, slo time.Duration) *Limit {
	l := &Limit{slo: slo, most: int64(most), least: int64(min(most, limitLeast)), every: limitEvery, now: time.Now}
	l.cur.Store(l.most)
	l.start = l.now()
	l.epoch = l.start
	return l
}

// Current returns the bound now.
func (l *Limit) Current() int { return int(l.cur.Load()) }

// Done records an answer that took d in the service, and judges the interval
// once it is over.
func (l *Limit) Done(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if d > l.slo {
		l.late++
	}
	if d > l.slo/limitQueued {
		l.waiting++
	}
	now := l.now()
	took := now.Sub(l.start)
	if took < l.every {
		return
	}
	l.judge(took)
	if now.Sub(l.epoch) >= limitPeakEvery {
		l.peak[1], l.peak[0], l.epoch = l.peak[0], 0, now
	}
	l.start, l.n, l.late, l.waiting = now, 0, 0, 0
}

// judge resizes the bound at the end of an interval that lasted took: see Limit.
func (l *Limit) judge(took time.Duration) {
	cur := l.cur.Load()
	l.peak[0] = max(l.peak[0], float64(l.n)/took.Seconds())
	if l.late*100 > l.n && l.waiting*2 > l.n {
		l.over++
	} else {
		l.over = 0
	}
	switch {
	case l.over >= limitStanding:
		fit := int64(max(l.peak[0], l.peak[1]) * l.slo.Seconds())
		l.cur.Store(max(l.least, min(cur, fit)))
	case l.late == 0:
		l.cur.Store(min(l.most, cur+max(1, cur/4)))
	}
}
