package admit

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/proxy/internal/ledger"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx/overload"
	"github.com/flashgate/flashgate/shared/voucher"
)

// admitWindow bounds the admitted flash reserves on their way to the ledger
// (admitted by the gate, not yet answered by the ledger), refusing new ones at
// the door while it is full, and sizes the bound from what the ledger's writes
// take now (additive increase, multiplicative decrease, as TCP sizes its
// window).
//
// MAX_INFLIGHT bounds what a proxy works on at once, but a fixed number is a
// rate only at one write latency: when the ledger and Postgres slow down (their
// CPU taken by a burst three times what they can write), 256 admitted writes
// in flight are 256 requests each waiting their turn, and every answer, 503s
// included, waits behind them.
//
// The window shrinks only on slow writes that stand in a queue:
//   - the writes are slow: their mean over the window is above the target,
//     three times the floor below (what a write costs here with no queue:
//     a slower machine or a longer network raises it), and never below
//     ADMIT_WRITE_TARGET;
//   - they queue: even the fastest write of the window took more than twice
//     the fastest this proxy saw in the last 10 to 20 s (CoDel's rule: the
//     minimum sojourn, not the mean, tells a standing queue from a burst that
//     passes). A machine that is slow all along has no queue to shed: its
//     good traffic is let in;
//   - and the window was full.
//
// It then shrinks in proportion to how far the mean is over the target (a
// gradient, at most by half), and grows back while the writes are within the
// target, full or not.
//
// Standard vouchers never pass here: their bound is the ledger's per-voucher
// one, and their requests wait for a slot on purpose (the article's race).
type admitWindow struct {
	target        time.Duration // mean admitted write above this (and queued): shrink
	least, most   float64
	every         time.Duration // a window is judged this often
	log           *slog.Logger
	now           func() time.Time
	shed          atomic.Uint64
	spared        atomic.Uint64 // retries of held orders let through a full window
	limitObserved atomic.Int64

	mu       sync.Mutex
	limit    float64
	inflight int
	start    time.Time     // of the window being measured
	sum      time.Duration // of the writes finished in it
	n        int
	fastest  time.Duration // of the writes finished in it; 0: none yet
	full     bool          // a request found the window full in it
	storm    overload.Storm

	// floor is the fastest write of this epoch and of the last: what a write
	// costs with no queue, on this machine, now.
	floor [2]time.Duration
	epoch time.Time
}

const (
	windowShrinkMost = 0.5  // the limit is multiplied by target/mean, never by less than this
	windowGrow       = 0.05 // and grows by this share of itself (at least 1) when fast
	windowEvery      = 100 * time.Millisecond
	windowLeast      = 32
	windowQueued     = 2 // fastest write over floor beyond this: a standing queue
	// windowTargetOverFloor scales the target with the machine: the mean
	// write may reach this many times what a write costs with no queue here
	// (the floor), ADMIT_WRITE_TARGET being the least target. A network hop
	// or a slower machine raises the floor, and the target with it.
	windowTargetOverFloor = 3
	windowFloorEvery      = 10 * time.Second // the floor forgets writes older than two of these
)

func newAdmitWindow(target time.Duration, most int, log *slog.Logger) *admitWindow {
	w := &admitWindow{target: target, least: windowLeast, most: float64(max(most, windowLeast)),
		every: windowEvery, log: log, now: time.Now}
	w.limit = w.most
	w.start = w.now()
	w.epoch = w.start
	w.limitObserved.Store(int64(w.limit))
	return w
}

// open reports whether a new flash reserve may go to the gate: fewer admitted
// writes in flight than the window. It takes no place: requests the gate
// refuses (sold out, at their limit) never count, and a burst's admissions may
// pass the window by what one round of the gate admits.
func (w *admitWindow) open() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if float64(w.inflight) >= w.limit {
		w.full = true
		// At its most the window only watches (MAX_INFLIGHT bounds the
		// proxy): a burst's first moments fill it before any write came
		// back, and refusing then would turn away customers of a sale the
		// ledger keeps up with. It refuses once slow writes shrank it.
		return w.limit >= w.most
	}
	return true
}

// enter counts an admitted claim on its way to the ledger.
func (w *admitWindow) enter() {
	w.mu.Lock()
	w.inflight++
	w.mu.Unlock()
}

// leave counts it back; wrote is how long the ledger's write took (0 when it
// failed: a fault says nothing of how fast writes go).
func (w *admitWindow) leave(wrote time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	if wrote > 0 {
		w.sum += wrote
		w.n++
		w.fastest = fastest(w.fastest, wrote)
		w.floor[0] = fastest(w.floor[0], wrote)
	}
	now := w.now()
	if now.Sub(w.start) < w.every {
		return
	}
	w.judge()
	if now.Sub(w.epoch) >= windowFloorEvery {
		w.floor[1], w.floor[0], w.epoch = w.floor[0], 0, now
	}
	w.limitObserved.Store(int64(w.limit))
	w.start, w.sum, w.n, w.fastest, w.full = now, 0, 0, 0, false
}

// judge resizes the window at the end of one: see admitWindow. Slow writes
// shrink it only when it was full: a window that never filled is not what
// made them slow (a cold pool in the first moments of a sale, a Postgres
// restart). Fast writes grow it back, full or not: a window that a stall
// shrank must not stay small once the ledger keeps up with fewer writes in
// flight than it.
func (w *admitWindow) judge() {
	if w.n == 0 {
		return
	}
	mean := w.sum / time.Duration(w.n)
	floor := fastest(w.floor[0], w.floor[1])
	target := max(w.target, windowTargetOverFloor*floor)
	slow := mean > target
	queued := w.fastest > windowQueued*floor
	switch {
	case slow && queued && w.full:
		w.limit = max(w.least, w.limit*max(windowShrinkMost, float64(target)/float64(mean)))
	case !slow:
		w.limit = min(w.most, w.limit+max(1, w.limit*windowGrow))
	}
}

// fastest is the shorter of a and b, a 0 standing for none.
func fastest(a, b time.Duration) time.Duration {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// windowFullBody is the answer to a request the window refuses.
var windowFullBody = func() []byte {
	b, _ := json.Marshal(api.ErrorBody{Error: voucher.CodeUnavailable,
		Message: "the ledger's writes are behind; retry shortly"})
	return b
}()

// refuse counts a refused request and returns its answer (503, Retry-After by
// relay). Like the shedder, it logs a storm (overload.Storm): a WARN line a
// second at most, with the count, not a line per request.
func (w *admitWindow) refuse(requestID string) ledger.Reply {
	w.shed.Add(1)
	w.storm.Add(w.now(), w.log, overload.Refusal{RequestID: requestID, Route: api.RouteReservations,
		Method: http.MethodPost, Cause: "shed: admitted writes behind (ADMIT_WRITE_TARGET)",
		Attrs: []any{"window", w.limitObserved.Load()}})
	return ledger.Reply{Status: http.StatusServiceUnavailable, Body: windowFullBody, Err: voucher.ErrUnavailable}
}

// WindowMax is the admission window's largest size: half of the bound on
// requests in flight the proxy starts with (Serving.StartBound), so that
// admitted writes waiting on the ledger never fill the proxy and the cheap
// answers (refusals, the window's own 503s) always find a slot.
func WindowMax(startBound int) int {
	return max(startBound/2, windowLeast)
}
