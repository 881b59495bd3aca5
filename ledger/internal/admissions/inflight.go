package admissions

import (
	"sync"
	"time"
)

// inFlight tracks the produces under way and when each started: a record
// not yet acknowledged may still land in the log, behind every offset the
// group lag measured, so the lag must cover the oldest (GroupLag.Covering).
// A produce stuck behind an unreachable broker can outlast HANGING_GRACE.
type inFlight struct {
	mu     sync.Mutex
	next   uint64
	starts map[uint64]time.Time
}

// start records a produce starting at t; the returned func records its end.
func (f *inFlight) start(t time.Time) (done func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.starts == nil {
		f.starts = map[uint64]time.Time{}
	}
	id := f.next
	f.next++
	f.starts[id] = t
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.starts, id)
	}
}

// oldest is the start of the oldest produce in flight (false: none).
func (f *inFlight) oldest() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var first time.Time
	for _, t := range f.starts {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first, !first.IsZero()
}
