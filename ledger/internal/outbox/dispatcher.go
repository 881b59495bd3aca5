// Package outbox delivers the events the store wrote in each change's
// transaction: the dispatcher (one ledger at a time, under an advisory lock),
// its sinks (webhook, Kafka) and their settings.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/events"
)

// Sink is where the dispatcher delivers events: a webhook URL or a Kafka topic.
type Sink interface {
	// Name keys the sink's cursor and failures, and labels its metrics.
	Name() string
	// Deliver sends evs (in id order) and returns those it gave up on (a
	// webhook parks an event after its attempts). An error means it did not
	// finish: the batch is sent again. Work in flight runs under ctx; a wait
	// between attempts ends early when stop closes (the batch is then not
	// finished).
	Deliver(ctx context.Context, stop <-chan struct{}, evs []events.Event) ([]store.Parked, error)
}

// DispatcherConfig is the dispatcher's part of the ledger's settings.
type DispatcherConfig struct {
	DatabaseURL string        // the lock's own connection
	Retention   time.Duration // EVENT_RETENTION: delivered events older than this are pruned
	Metrics     *Metrics
}

// The dispatcher's pace. A ledger that is not delivering tries the lock every
// lockPoll, so another one takes over within that once the holder's session
// ended (a killed process's at once; a stalled network's after TCP gives up).
const (
	dispatchPoll   = 100 * time.Millisecond // how often the watermark moves and idle sinks look again
	dispatchBatch  = 500                    // events per delivery
	feedPoll       = time.Second            // how often the watermark moves when no sink is configured
	lockPoll       = time.Second
	pruneEvery     = time.Minute
	sinkRetryPause = time.Second // after a batch that did not finish
	heldLogEvery   = 30 * time.Second
)

// Dispatcher delivers the outbox to its sinks from exactly one ledger at a
// time: the one holding a Postgres advisory lock on a connection of its own.
// It moves the watermark, runs one loop per sink (each with its own cursor,
// so a slow webhook never holds Kafka back), retries the events an operator
// asked to, measures the lag and prunes what every sink has.
type Dispatcher struct {
	store *store.Store
	sinks []Sink
	cfg   DispatcherConfig
	log   *slog.Logger

	Watermark  atomic.Int64
	Positions  []atomic.Int64 // per sink, its cursor
	heldLogged time.Time      // when a held-back watermark was last logged (lead's goroutine only)
}

// NewDispatcher returns the dispatcher of store's events to sinks (none: it
// only moves the watermark, for GET /admin/events, and prunes).
func NewDispatcher(st *store.Store, sinks []Sink, log *slog.Logger, cfg DispatcherConfig) *Dispatcher {
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	for _, sk := range sinks { // every sink's series, at 0 until something happens
		m := cfg.Metrics
		m.eventsDelivered.WithLabelValues(sk.Name())
		m.eventsFailed.WithLabelValues(sk.Name())
		m.eventErrors.WithLabelValues(sk.Name())
		m.eventLag.WithLabelValues(sk.Name())
	}
	return &Dispatcher{store: st, sinks: sinks, cfg: cfg, log: log, Positions: make([]atomic.Int64, len(sinks))}
}

// Run tries the lock until stop closes and delivers while it holds it. At
// stop it finishes no new batch, and closes the lock's connection, which
// frees the lock for another ledger at once. Work runs under ctx.
func (d *Dispatcher) Run(ctx context.Context, stop <-chan struct{}) {
	lock := store.NewDispatchLock(d.cfg.DatabaseURL) // kept between tries: a ledger that waits does not reconnect each time
	defer lock.Close(context.WithoutCancel(ctx))
	for !stopped(stop) {
		locked, err := lock.Try(ctx)
		if err != nil {
			d.log.Warn("event dispatcher: lock", "err", err)
		}
		if locked {
			d.log.Info("event dispatcher: delivering from this ledger")
			d.cfg.Metrics.EventLeader.Set(1)
			d.lead(ctx, stop, lock)
			d.cfg.Metrics.EventLeader.Set(0)
			lock.Close(context.WithoutCancel(ctx)) // frees the lock, also when the session is gone already
			d.log.Info("event dispatcher: stopped delivering")
		}
		select {
		case <-stop:
		case <-time.After(lockPoll):
		}
	}
}

// stopped reports whether stop has closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// lead delivers until stop closes or the lock's session is lost.
func (d *Dispatcher) lead(ctx context.Context, stop <-chan struct{}, lock *store.DispatchLock) {
	run, lost := context.WithCancel(ctx)
	defer lost()
	var wg sync.WaitGroup
	for i, sk := range d.sinks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.runSink(run, stop, i, sk)
		}()
	}
	defer wg.Wait()
	if wm, err := d.store.Watermark(run); err == nil {
		d.Watermark.Store(wm)
	}
	tick := time.NewTicker(dispatchPoll)
	defer tick.Stop()
	var checked, pruned, advanced time.Time
	advanceEvery := dispatchPoll
	if len(d.sinks) == 0 {
		advanceEvery = feedPoll // only the pull feed reads the watermark
	}
	for {
		select {
		case <-stop:
			return
		case <-run.Done():
			return
		case <-tick.C:
		}
		if time.Since(checked) >= lockPoll {
			checked = time.Now()
			if err := lock.Holds(run); err != nil {
				d.log.Error("event dispatcher: lost the lock's connection", "err", err)
				return
			}
			d.measureLag(run)
		}
		if time.Since(advanced) >= advanceEvery {
			advanced = time.Now()
			d.advance(run)
		}
		if time.Since(pruned) >= pruneEvery {
			pruned = time.Now()
			d.Prune(run)
		}
	}
}

// advance moves the watermark and counts the events that passed it.
func (d *Dispatcher) advance(ctx context.Context) {
	prev := d.Watermark.Load()
	wm, err := d.store.AdvanceWatermark(ctx, prev, time.Second)
	switch {
	case errors.Is(err, store.ErrWatermarkHeld):
		if time.Since(d.heldLogged) >= heldLogEvery {
			d.heldLogged = time.Now()
			d.log.Warn("event delivery waits", "watermark", prev, "err", err)
		}
		return
	case err != nil:
		if ctx.Err() == nil {
			d.log.Error("event dispatcher: watermark", "err", err)
		}
		return
	}
	if wm <= prev {
		return
	}
	if n, err := d.store.CountEvents(ctx, prev, wm); err == nil {
		d.cfg.Metrics.eventsWritten.Add(float64(n))
	}
	d.Watermark.Store(wm)
}

// measureLag sets each sink's lag: the age of its oldest undelivered event.
func (d *Dispatcher) measureLag(ctx context.Context) {
	if len(d.sinks) == 0 {
		return
	}
	now, err := d.store.Now(ctx)
	if err != nil {
		return
	}
	for i, sk := range d.sinks {
		at, ok, err := d.store.UndeliveredSince(ctx, d.Positions[i].Load())
		if err != nil {
			return
		}
		lag := 0.0
		if ok {
			lag = max(0, now.Sub(at).Seconds())
		}
		d.cfg.Metrics.eventLag.WithLabelValues(sk.Name()).Set(lag)
	}
}

// Prune deletes the events every sink has delivered, once older than the retention.
func (d *Dispatcher) Prune(ctx context.Context) {
	upTo := d.Watermark.Load()
	for i := range d.sinks {
		upTo = min(upTo, d.Positions[i].Load())
	}
	now, err := d.store.Now(ctx)
	if err != nil {
		return
	}
	var total int64
	for {
		n, err := d.store.PruneEvents(ctx, upTo, now.Add(-d.cfg.Retention), 5000)
		if err != nil {
			d.log.Error("event dispatcher: prune", "err", err)
			return
		}
		total += n
		if n < 5000 {
			break
		}
	}
	if total > 0 {
		d.cfg.Metrics.eventsPruned.Add(float64(total))
		d.log.Info("pruned delivered events", "events", total, "retention", d.cfg.Retention.String())
	}
}

// runSink delivers to sink i from its cursor up to the watermark, batch after
// batch, and the events an operator asked to retry, until stop closes or run
// ends.
func (d *Dispatcher) runSink(run context.Context, stop <-chan struct{}, i int, sk Sink) {
	pos, err := d.store.Cursor(run, sk.Name())
	for err != nil {
		if !pause(run, stop, sinkRetryPause) {
			return
		}
		pos, err = d.store.Cursor(run, sk.Name())
	}
	d.Positions[i].Store(pos)
	for !stopped(stop) && run.Err() == nil {
		d.retryParked(run, stop, sk)
		wm := d.Watermark.Load()
		if wm <= pos {
			pause(run, stop, dispatchPoll)
			continue
		}
		next, err := d.deliverBatch(run, stop, sk, pos, wm)
		if err != nil {
			if run.Err() == nil && !stopped(stop) {
				d.log.Warn("event delivery did not finish: sending the batch again", "sink", sk.Name(), "after", pos, "err", err)
			}
			pause(run, stop, sinkRetryPause)
			continue
		}
		pos = next
		d.Positions[i].Store(pos)
	}
}

// deliverBatch sends the next batch after pos to sk and moves its cursor.
func (d *Dispatcher) deliverBatch(run context.Context, stop <-chan struct{}, sk Sink, pos, wm int64) (int64, error) {
	evs, err := d.store.Events(run, pos, wm, dispatchBatch)
	if err != nil || len(evs) == 0 {
		return wm, err // none left up to the watermark: pruned, or rolled back
	}
	parked, err := sk.Deliver(run, stop, evs)
	if err != nil {
		return pos, err
	}
	last := evs[len(evs)-1].ID
	if err := d.store.Park(run, sk.Name(), last, parked); err != nil {
		return pos, err
	}
	m := d.cfg.Metrics
	m.eventsDelivered.WithLabelValues(sk.Name()).Add(float64(len(evs) - len(parked)))
	m.eventsFailed.WithLabelValues(sk.Name()).Add(float64(len(parked)))
	for _, p := range parked {
		d.log.Error("event parked as failed", "sink", sk.Name(), "event", p.ID, "attempts", p.Attempts, "err", p.LastError)
	}
	return last, nil
}

// retryParked sends again the events of sk an operator asked to retry.
func (d *Dispatcher) retryParked(run context.Context, stop <-chan struct{}, sk Sink) {
	retry, err := d.store.ParkedEvents(run, sk.Name(), "RETRY", 0, 100)
	if err != nil {
		return
	}
	m := d.cfg.Metrics
	for _, p := range retry {
		parked, err := sk.Deliver(run, stop, []events.Event{p.Event})
		switch {
		case err != nil:
			return
		case len(parked) > 0:
			m.eventsFailed.WithLabelValues(sk.Name()).Inc()
			err = d.store.Park(run, sk.Name(), 0, parked)
		default:
			m.eventsDelivered.WithLabelValues(sk.Name()).Inc()
			err = d.store.Delivered(run, sk.Name(), p.ID)
		}
		if err != nil {
			return
		}
	}
}

// pause waits d unless stop closes or run ends first; it reports whether to
// go on.
func pause(run context.Context, stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	case <-run.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// backoff is the wait after the n-th failed attempt (n >= 1): base doubled
// each time up to most, then a random part of it dropped (half at most), so
// that retries of many events spread out.
func backoff(n int, base, most time.Duration, rnd func() float64) time.Duration {
	d := float64(base) * math.Pow(2, float64(n-1))
	d = min(d, float64(most))
	return time.Duration(d/2 + rnd()*d/2)
}

// sinkName is the name a sink's cursor is kept under.
func sinkName(kind, target string) string { return fmt.Sprintf("%s:%s", kind, target) }
