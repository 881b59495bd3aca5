// Package batch is "natural batching": while one call for a key is in flight,
// new items for that key queue; when it returns, the whole queue (up to a cap)
// goes in the next call. There is no timer, so a lone item goes at once and pays
// no added latency, and under load the batches grow by themselves. The proxy
// batches reserve-script calls per voucher with it, the ledger its writes.
package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrDropped marks an item whose caller's context ended while it was still
// queued: it was never handed to Func (Do's error wraps it and the context's).
var ErrDropped = errors.New("dropped from its queue before its batch ran")

// Func runs one batch for key and returns one result per item, in order. An
// error fails every item of the batch.
type Func[K comparable, T, R any] func(ctx context.Context, key K, items []T) ([]R, error)

// Batcher runs Func over queued items, one call in flight per key.
type Batcher[K comparable, T, R any] struct {
	fn   Func[K, T, R]
	max  int
	base context.Context

	mu     sync.Mutex
	queues map[K]*queue[T, R]
	sizes  func(int) // observes each batch's size; may be nil

	callerDeadlines bool // see CallerDeadlines
}

type queue[T, R any] struct {
	waiting []*waiter[T, R]
}

type waiter[T, R any] struct {
	ctx   context.Context
	item  T
	done  chan result[R] // Do's and DoAll's: the caller waits on it
	then  func(R, error) // Go's, instead of done: called once with the result
	stop  func() bool    // Go's: stops the watch on ctx once the batch took the item
	state atomic.Int32   // queued, then running (its batch took it) or abandoned (its caller left first)
}

// deliver hands w its result: to its caller waiting on done, or to then.
func (w *waiter[T, R]) deliver(res result[R]) {
	if w.then == nil {
		w.done <- res
		return
	}
	w.then(res.r, res.err)
}

// dropped is the error of an item abandoned while queued.
func dropped(ctx context.Context) error { return fmt.Errorf("%w: %w", ErrDropped, ctx.Err()) }

// A waiter's states: each moves once, from queued to one of the others, so
// that an item either runs and its caller gets the result, or never runs.
const (
	queued int32 = iota
	running
	abandoned
)

// wait returns w's result. When ctx ends first and w's batch has not taken it
// yet, w is abandoned and never runs (ErrDropped and ctx's error); once its batch took it,
// the caller waits for what the batch did for it, however long the batch
// takes (the batch's own deadline bounds it): the item's effects are never
// left unknown to the caller.
func (w *waiter[T, R]) wait(ctx context.Context) (R, error) {
	select {
	case res := <-w.done:
		return res.r, res.err
	case <-ctx.Done():
	}
	// The state moves once: if it is not running now, nothing will run w.
	if w.state.CompareAndSwap(queued, abandoned) || w.state.Load() == abandoned {
		var zero R
		return zero, dropped(ctx)
	}
	res := <-w.done
	return res.r, res.err
}

type result[R any] struct {
	r   R
	err error
}

// New returns a Batcher that calls fn with at most max items at a time. Calls
// run under base (the service's lifetime), not under any one caller's context,
// since a batch serves many callers; fn sets its own deadline.
func New[K comparable, T, R any](base context.Context, max int, fn Func[K, T, R]) *Batcher[K, T, R] {
	if max < 1 {
		max = 1
	}
	return &Batcher[K, T, R]{fn: fn, max: max, base: base, queues: map[K]*queue[T, R]{}}
}

// ObserveSizes makes the Batcher report each batch's size to f (for metrics).
func (b *Batcher[K, T, R]) ObserveSizes(f func(int)) { b.sizes = f }

// CallerDeadlines makes each call's context carry the earliest deadline of
// its items' callers, so that a caller's deadline bounds its whole wait: the
// queue (an item still queued at its deadline is dropped) and the call that
// took it. Without it, an item taken a moment before its deadline waits for
// a whole call more (the call sets its own deadline from its start). Call it
// before the first Do.
func (b *Batcher[K, T, R]) CallerDeadlines() { b.callerDeadlines = true }

// Do queues item for key and waits for its result. If ctx ends while the item
// is still queued, it is dropped from its batch and Do returns ErrDropped
// wrapping ctx's error; an
// item whose batch already started runs, and Do returns its result once the
// batch returns (see waiter.wait).
func (b *Batcher[K, T, R]) Do(ctx context.Context, key K, item T) (R, error) {
	w := &waiter[T, R]{ctx: ctx, item: item, done: make(chan result[R], 1)}
	b.enqueue(key, w)
	return w.wait(ctx)
}

// DoAll queues items for key together (they go in the same call when the cap
// allows) and waits for all their results. errs[i] is item i's error.
func (b *Batcher[K, T, R]) DoAll(ctx context.Context, key K, items []T) ([]R, []error) {
	ws := make([]*waiter[T, R], len(items))
	for i, item := range items {
		ws[i] = &waiter[T, R]{ctx: ctx, item: item, done: make(chan result[R], 1)}
	}
	b.enqueue(key, ws...)
	rs, errs := make([]R, len(items)), make([]error, len(items))
	for i, w := range ws {
		rs[i], errs[i] = w.wait(ctx)
	}
	return rs, errs
}

// Go queues item for key and returns at once; then gets the item's result,
// exactly once, from the goroutine that ran its batch (or, when ctx ended
// before the batch took it, ErrDropped wrapping ctx's error: the item never
// runs). It spares the caller's goroutine a park and a wake between two
// stages: a batch may queue its items' next stage with GoAll, and the caller
// waits once, for the last. then runs on the batch's goroutine and must not
// block: the next batch of its key waits for it. The caller watches ctx
// itself, as it waits anyway: when ctx ends, the ticket's Abandon drops the
// item if it is still queued (then is not called then).
func (b *Batcher[K, T, R]) Go(ctx context.Context, key K, item T, then func(R, error)) Ticket[T, R] {
	w := &waiter[T, R]{ctx: ctx, item: item, then: then}
	b.enqueue(key, w)
	return Ticket[T, R]{w: w}
}

// Ticket is an item queued with Go.
type Ticket[T, R any] struct{ w *waiter[T, R] }

// Abandon drops the item if its batch has not taken it yet, and returns
// ErrDropped wrapping its context's error; once its batch took it (or found
// its context ended and answered then), Abandon returns nil and then has the
// item's result, or will.
func (t Ticket[T, R]) Abandon() error {
	if t.w.state.CompareAndSwap(queued, abandoned) {
		return dropped(t.w.ctx)
	}
	return nil
}

// Call is one item queued with GoAll: its caller's context, and where its
// result goes.
type Call[T, R any] struct {
	Ctx  context.Context
	Item T
	Then func(R, error)
}

// GoAll is Go for several items of key queued together, for callers that do
// not watch their contexts: they go in the same call when the cap allows, as
// DoAll's do, and an item whose context ends while it is queued is dropped at
// once, its Then getting ErrDropped wrapping the context's error.
func (b *Batcher[K, T, R]) GoAll(key K, calls []Call[T, R]) {
	ws := make([]*waiter[T, R], len(calls))
	for i, c := range calls {
		w := &waiter[T, R]{ctx: c.Ctx, item: c.Item, then: c.Then}
		// Set before the item is queued, so that its batch always sees it.
		w.stop = context.AfterFunc(c.Ctx, func() {
			if w.state.CompareAndSwap(queued, abandoned) {
				var zero R
				c.Then(zero, dropped(c.Ctx))
			}
		})
		ws[i] = w
	}
	b.enqueue(key, ws...)
}

// enqueue queues ws for key, and starts the key's drain unless one runs.
func (b *Batcher[K, T, R]) enqueue(key K, ws ...*waiter[T, R]) {
	b.mu.Lock()
	q, running := b.queues[key]
	if !running {
		q = &queue[T, R]{}
		b.queues[key] = q
	}
	q.waiting = append(q.waiting, ws...)
	b.mu.Unlock()
	if !running {
		go b.drain(key, q)
	}
}

// drain runs batches for key until its queue is empty, then retires the queue.
func (b *Batcher[K, T, R]) drain(key K, q *queue[T, R]) {
	for {
		b.mu.Lock()
		n := min(len(q.waiting), b.max)
		if n == 0 {
			delete(b.queues, key)
			b.mu.Unlock()
			return
		}
		taken := q.waiting[:n:n]
		q.waiting = q.waiting[n:]
		b.mu.Unlock()
		b.run(key, taken)
	}
}

func (b *Batcher[K, T, R]) run(key K, taken []*waiter[T, R]) {
	live := taken[:0:0]
	items := make([]T, 0, len(taken))
	for _, w := range taken {
		if w.ctx.Err() != nil && w.state.CompareAndSwap(queued, abandoned) {
			if w.then != nil {
				var zero R
				w.then(zero, dropped(w.ctx)) // nobody waits on it: answer it here
			}
			continue // its caller left, or is leaving (wait answers it)
		}
		if !w.state.CompareAndSwap(queued, running) {
			continue // abandoned by its caller meanwhile
		}
		if w.stop != nil {
			w.stop()
		}
		live = append(live, w)
		items = append(items, w.item)
	}
	if len(live) == 0 {
		return
	}
	if b.sizes != nil {
		b.sizes(len(items))
	}
	ctx := b.base
	if b.callerDeadlines {
		var earliest time.Time
		for _, w := range live {
			if d, ok := w.ctx.Deadline(); ok && (earliest.IsZero() || d.Before(earliest)) {
				earliest = d
			}
		}
		if !earliest.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, earliest)
			defer cancel()
		}
	}
	rs, err := b.call(ctx, key, items)
	for i, w := range live {
		if err != nil {
			w.deliver(result[R]{err: err})
			continue
		}
		w.deliver(result[R]{r: rs[i]})
	}
}

// call runs fn, turning a panic or a wrong result count into an error so that
// no waiter is left hanging.
func (b *Batcher[K, T, R]) call(ctx context.Context, key K, items []T) (rs []R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("batch for %v panicked: %v", key, p)
		}
	}()
	rs, err = b.fn(ctx, key, items)
	if err == nil && len(rs) != len(items) {
		err = fmt.Errorf("batch for %v: %d results for %d items", key, len(rs), len(items))
	}
	return rs, err
}
