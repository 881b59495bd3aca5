package systemtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Bounds of a run with faults (see runLinearizability).
const (
	linMaxPending  = 60
	linAfterFaults = 60
)

// linRun is one recorded run.
type linRun struct {
	h         *linHistory
	oversells []string            // DB states seen during the run that break the limits
	final     map[uint8]linResult // the final reads
	client    linClient           // for the final retries
	retries   []linRetry          // the final retries of active orders
}

// runLinearizability runs w's clients against code through s's proxy until w.ops
// calls are recorded and faults (may be nil) returned, then reads every order
// once more. faults gets a function that waits until n calls are recorded.
// An indeterminate call is retried with the same input a few times (each try
// is its own operation), then the client moves on.
//
// Every indeterminate call stays open to the end of the history and widens
// porcupine's search, so while linMaxPending of them are recorded the clients
// wait for the faults to be over instead of piling up more; and they run at
// least linAfterFaults calls once the faults are over.
func runLinearizability(t *testing.T, s *stack, code string, spec voucherSpec, flash bool, w linWorkload,
	faults func(waitOps func(n int), now func() time.Duration)) *linRun {
	t.Helper()
	require.LessOrEqual(t, w.orders, linMaxOrders)
	run := &linRun{h: newLinHistory()}
	h := run.h
	hc := &http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}
	cl := linClient{http: hc, base: s.ProxyURL, code: code,
		order: func(o uint8) string { return fmt.Sprintf("%s-o%d", code, o) }}

	var recorded, pending atomic.Int64
	var hints linHints
	target := atomic.Int64{} // calls to record; raised when the faults are over
	target.Store(int64(w.ops))
	faultsDone := make(chan struct{})
	if faults == nil {
		close(faultsDone)
	} else {
		go func() {
			defer close(faultsDone)
			faults(func(n int) {
				for recorded.Load() < int64(n) {
					time.Sleep(2 * time.Millisecond)
				}
			}, func() time.Duration { return time.Duration(h.now()) })
			target.Store(max(int64(w.ops), recorded.Load()+linAfterFaults))
		}()
	}
	over := func() bool {
		select {
		case <-faultsDone:
			return true
		default:
			return false
		}
	}
	more := func() bool { return recorded.Load() < target.Load() || !over() }
	pause := func() {
		for pending.Load() >= linMaxPending && !over() {
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The database must never oversell, at any moment.
	stopWatch := watchLimits(s, code, spec.perUser)

	var wg sync.WaitGroup
	for i := range w.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
			for more() {
				// A client thinks a little between calls: fewer calls overlap,
				// which keeps porcupine's search narrow, and the run lasts long
				// against the sold-out flag's window.
				time.Sleep(time.Duration(rng.IntN(int(w.think))))
				op := w.next(rng, &hints, int(recorded.Load()))
				backoff := 20 * time.Millisecond
				for attempt := 0; ; attempt++ {
					pause()
					call := h.now()
					r, note := cl.do(op)
					ret := h.now()
					hints.learn(op, r)
					if !(r.indeterminate() && op.Kind == linGet) { // an unanswered get tells nothing
						h.add(i, op, call, r, ret, note)
						recorded.Add(1)
						if r.indeterminate() {
							pending.Add(1)
						}
					}
					if !r.indeterminate() || attempt == 5 || !more() {
						break
					}
					time.Sleep(backoff + time.Duration(rng.IntN(int(backoff))))
					backoff = min(2*backoff, 200*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	<-faultsDone
	run.oversells = stopWatch()

	final := readFinal(h, cl, w)
	if flash {
		checkDivergence(t, s, code, faults == nil)
	}
	run.final, run.client = final, cl
	return run
}

// readFinal reads every order once more, one at a time, as client w.clients:
// the final state joins the history.
func readFinal(h *linHistory, cl linClient, w linWorkload) map[uint8]linResult {
	time.Sleep(100 * time.Millisecond)
	final := map[uint8]linResult{}
	for o := range w.orders {
		op := linOp{Kind: linGet, Order: uint8(o)}
		if r, ok := sequentialCall(h, cl, w.clients, op); ok {
			final[op.Order] = r
		}
	}
	return final
}

// retryActive has every active order's customer retry it, once no sold-out
// flag can be alive. The system is quiet and the final reads pinned the state,
// so the answers are checked one by one (checkFinalRetries), not by porcupine,
// whose search would have to exhaust every order of the history before them to
// prove one wrong.
func (run *linRun) retryActive(spec voucherSpec) {
	time.Sleep(spec.flagWindow + 10*time.Millisecond)
	for o := range uint8(linMaxOrders) {
		if r, ok := run.final[o]; ok && (r.Code == string(voucher.Reserved) || r.Code == string(voucher.Confirmed)) {
			op := linOp{Kind: linReserve, Customer: r.Customer, Order: o}
			got, note := run.client.do(op)
			for attempt := 0; got.indeterminate() && attempt < 20; attempt++ {
				time.Sleep(50 * time.Millisecond) // a fault answer says nothing: ask again
				got, note = run.client.do(op)
			}
			run.retries = append(run.retries, linRetry{op: op, got: got, note: note})
		}
	}
}

// linRetry is a final retry of an active order and its answer.
type linRetry struct {
	op   linOp
	got  linResult
	note string
}

// sequentialCall makes one call after the concurrent phase, retrying until it
// gets an answer (the services may still be coming back), and records it.
func sequentialCall(h *linHistory, cl linClient, client int, op linOp) (linResult, bool) {
	for attempt := 0; attempt < 20; attempt++ {
		call := h.now()
		r, note := cl.do(op)
		if !r.indeterminate() {
			h.add(client, op, call, r, h.now(), note)
			return r, true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return linResult{}, false
}

// watchLimits reads code's row and counts every 10ms until stop is called, and
// stop returns the states it saw that break the voucher's limits.
func watchLimits(s *stack, code string, perUser int) (stop func() []string) {
	ctx, cancel := context.WithCancel(context.Background())
	var oversells []string
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			var used, limit, active, maxPer int
			err := s.pool.QueryRow(ctx, voucherStateSQL, code).Scan(&used, &limit, &active, &maxPer)
			if err == nil && (used > limit || used != active || maxPer > perUser) {
				oversells = append(oversells, fmt.Sprintf(
					"used_count %d, total_limit %d, active rows %d, most per customer %d", used, limit, active, maxPer))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() []string {
		cancel()
		<-watched
		return oversells
	}
}
