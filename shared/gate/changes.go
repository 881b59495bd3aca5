package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/voucher"
	"github.com/flashgate/flashgate/shared/wait"
)

// ChangesChannel is the Redis channel on which the ledger names a voucher whose
// terms or stock changed (an admin change, a pause, uses given back), so every
// proxy and ledger drops what it cached about it at once instead of after its
// TTLs. Each message is one voucher code.
const ChangesChannel = "flashgate:voucher-changes"

// Publisher is the Publish method of a redis.UniversalClient.
type Publisher interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
}

// Subscriber is the Subscribe method of a redis.UniversalClient.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// PublishChange names code on ChangesChannel. Delivery is at most once: a
// subscriber that was disconnected misses it and falls back to its TTLs.
func PublishChange(ctx context.Context, p Publisher, code string) error {
	if err := checkCode(code); err != nil {
		return err
	}
	if err := p.Publish(ctx, ChangesChannel, code).Err(); err != nil {
		return fmt.Errorf("publish change of %s: %w", code, err)
	}
	return nil
}

// watchHealthCheck is how often a quiet subscription is pinged: a connection
// that died without a close (a partition) is replaced within about twice this.
const watchHealthCheck = 3 * time.Second

// WatchChanges subscribes to ChangesChannel and calls onChange with each valid
// code, one at a time, until ctx ends (NewWatcher(s, onChange, log).Run).
func WatchChanges(ctx context.Context, s Subscriber, onChange func(code string), log *slog.Logger) {
	NewWatcher(s, onChange, log).Run(ctx)
}

// Watcher is a subscription to ChangesChannel. Besides delivering each change,
// it can Sync: wait until every change published before the call has been
// delivered. Redis answers a PING on the subscription's own connection after
// the messages it queued for it before, so the pong of a ping sent after Sync
// was called comes after them. A proxy uses it to learn a voucher created a
// moment ago: the ledger publishes the creation before it answers 201, so a
// reserve sent after that answer finds the code after one Sync.
type Watcher struct {
	sub      Subscriber
	onChange func(code string)
	log      *slog.Logger

	mu        sync.Mutex
	ps        *redis.PubSub // nil until Run subscribed
	pinged    *syncRound    // the round whose ping is out, nil when none
	waiting   *syncRound    // the callers that came after it was sent: the next ping is theirs
	sent      time.Time     // when the last ping went
	scheduled bool          // the waiting round's ping is due at sent + syncGap
	rounds    atomic.Uint64
}

// syncRound is one ping: the callers waiting for its pong.
type syncRound struct {
	id   string
	done chan struct{}
}

// NewWatcher returns a watcher of s; Run starts it.
func NewWatcher(s Subscriber, onChange func(code string), log *slog.Logger) *Watcher {
	return &Watcher{sub: s, onChange: onChange, log: log}
}

// syncGap is the least time between two pings of Sync: a flood of misses
// (made-up codes) costs Redis and the watcher at most 1,000 pings a second,
// each miss waiting at most this much longer.
const syncGap = time.Millisecond

// syncPrefix marks the pings of Sync; the health checks' pings carry none.
const syncPrefix = "flashgate-sync-"

// Run calls onChange with each valid code, one at a time, until ctx ends.
// go-redis resubscribes by itself after a lost connection (the receive loop
// pings a quiet one to notice); messages published meanwhile are lost, which
// the subscriber's TTLs cover. A message that is not a voucher code is logged
// and skipped.
func (w *Watcher) Run(ctx context.Context) {
	ps := w.sub.Subscribe(ctx, ChangesChannel)
	defer func() { _ = ps.Close() }() // the last one, after a resubscription
	w.mu.Lock()
	w.ps = ps
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.ps = nil
		w.mu.Unlock()
	}()
	// A receive waits out its timeout whatever ctx says (go-redis takes only
	// its deadline): closing the subscription ends it at once, so a stop is
	// not held up to watchHealthCheck.
	defer context.AfterFunc(ctx, func() {
		w.mu.Lock()
		p := w.ps
		w.mu.Unlock()
		if p != nil {
			_ = p.Close()
		}
	})()
	quiet := false // the last receive timed out, and a ping was sent
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, watchHealthCheck)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, redis.ErrClosed) {
				return // the subscription was closed under us
			}
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				if !quiet { // quiet for a while: ping it, and see it answer
					quiet = true
					_ = ps.Ping(ctx)
					continue
				}
				// No answer to a ping for a whole interval: a connection that
				// died without a close. Subscribe again on a new one; the
				// round in flight lost its ping, its callers' bounds end it.
				quiet = false
				_ = ps.Close()
				ps = w.sub.Subscribe(ctx, ChangesChannel)
				w.mu.Lock()
				w.ps, w.pinged = ps, nil
				w.mu.Unlock()
				continue
			}
			// A broken connection: go-redis reconnects and resubscribes on
			// the next receive (after a pause, should Redis be down).
			quiet = false
			if !wait.For(ctx, 100*time.Millisecond) {
				return
			}
			continue
		}
		quiet = false
		switch m := msg.(type) {
		case *redis.Message:
			if !voucher.ValidCode(m.Payload) {
				w.log.Warn("voucher change with an invalid code", "channel", m.Channel, "payload", m.Payload)
				continue
			}
			w.onChange(m.Payload)
		case *redis.Pong:
			w.ponged(m.Payload)
		}
	}
}

// Sync waits until every change published before the call was delivered to
// onChange, or ctx ends (then it returns ctx's error, and the caller knows
// nothing more than before). Concurrent callers share a ping: one is out at a
// time, and the callers that came while it was out share the next one.
func (w *Watcher) Sync(ctx context.Context) error {
	w.mu.Lock()
	if w.ps == nil {
		w.mu.Unlock()
		return errors.New("voucher changes: not subscribed")
	}
	r := w.waiting
	if r == nil {
		r = &syncRound{id: fmt.Sprintf("%s%d", syncPrefix, w.rounds.Add(1)), done: make(chan struct{})}
		w.waiting = r
	}
	if w.pinged == nil {
		w.kickLocked()
	}
	w.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		if w.pinged == r { // its pong is lost (a reconnect): let the next round go
			w.pinged = nil
			if w.waiting != nil {
				w.kickLocked()
			}
		}
		w.mu.Unlock()
		return ctx.Err()
	}
}

// kickLocked sends the waiting round's ping now, or once syncGap has passed
// since the last one (a timer, which a second kick does not start again).
func (w *Watcher) kickLocked() {
	if w.scheduled {
		return
	}
	wait := syncGap - time.Since(w.sent)
	if wait <= 0 {
		w.sendLocked()
		return
	}
	w.scheduled = true
	time.AfterFunc(wait, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.scheduled = false
		if w.pinged == nil && w.waiting != nil && w.ps != nil {
			w.sendLocked()
		}
	})
}

// sendLocked pings for the waiting round, which becomes the round out.
func (w *Watcher) sendLocked() {
	r := w.waiting
	w.pinged, w.waiting, w.sent = r, nil, time.Now()
	if err := w.ps.Ping(context.Background(), r.id); err != nil {
		w.pinged = nil // its callers' bounds end their wait
	}
}

// ponged ends the round whose ping this pong answers, and sends the next one.
func (w *Watcher) ponged(payload string) {
	if !strings.HasPrefix(payload, syncPrefix) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pinged == nil || w.pinged.id != payload {
		return
	}
	close(w.pinged.done)
	w.pinged = nil
	if w.waiting != nil && w.ps != nil {
		w.kickLocked()
	}
}
