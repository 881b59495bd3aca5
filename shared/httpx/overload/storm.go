package overload

import (
	"log/slog"
	"sync"
	"time"
)

// Storm logs a storm of refusals (requests shed at MAX_INFLIGHT, or refused by
// the proxy's admission window). Like every 503 each refusal is logged with
// its cause and a request id, but not a line each: thousands a second would
// bury everything else. At most one WARN line a second, "requests shed", says
// how many were refused since the line before ("shed"), how many for each
// cause ("causes"), and the request id, route, method and cause ("err") of the
// latest, a sample to look up. The first refusal of a storm is logged at once;
// those of its last second by a timer, so that no refusal goes unlogged when
// the storm ends. A refusal is an expected answer of a service at its bound,
// not a fault of the service: hence WARN, not ERROR.
//
// The zero Storm is ready to use.
type Storm struct {
	mu      sync.Mutex
	lastLog time.Time   // when the latest line was due
	pending stormLine   // the refusals since the latest line
	timer   *time.Timer // armed while refusals wait for their line
}

// Refusal is one refused request, as its storm's line tells of it.
type Refusal struct {
	RequestID, Route, Method string
	Cause                    string // the line's "err", and its key in "causes"
	Attrs                    []any  // more fields of the line, e.g. the bound in force
}

// stormLine is the refusals one line counts.
type stormLine struct {
	n      uint64
	causes map[string]uint64
	latest Refusal
	log    *slog.Logger // the latest's; nil: not logged
}

// stormLogEvery is how often a storm is logged.
const stormLogEvery = time.Second

// Add counts r, refused at now, and logs the storm's line on log when a
// second has passed since the line before (nil: counted, never logged).
func (st *Storm) Add(now time.Time, log *slog.Logger, r Refusal) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := &st.pending
	if p.causes == nil {
		p.causes = map[string]uint64{}
	}
	p.n++
	p.causes[r.Cause]++
	p.latest, p.log = r, log
	if since := now.Sub(st.lastLog); since >= stormLogEvery {
		st.lastLog = now
		st.flushLocked()
	} else if st.timer == nil {
		st.timer = time.AfterFunc(stormLogEvery-since, st.due)
	}
}

// due logs the refusals left when their second is over and none came after
// it to log them.
func (st *Storm) due() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.timer = nil
	if st.pending.n > 0 {
		st.lastLog = st.lastLog.Add(stormLogEvery)
		st.flushLocked()
	}
}

// flushLocked writes the pending line and starts the next; st.mu is held.
func (st *Storm) flushLocked() {
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	p := st.pending
	st.pending = stormLine{}
	if p.log == nil || p.n == 0 {
		return
	}
	r := p.latest
	args := append([]any{"shed", p.n, "causes", p.causes, "request_id", r.RequestID,
		"route", r.Route, "method", r.Method, "err", r.Cause}, r.Attrs...)
	p.log.Warn("requests shed", args...)
}
