package sale

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Limiter bounds the standard-path reserves of one voucher that work at once
// (MAX_INFLIGHT_PER_VOUCHER). They all end on the same voucher row, whose
// lock serializes them: past a few at a time more only wait in Postgres
// holding connections every other voucher needs, and the p99 goes to seconds.
// A request waits for a slot at most wait (VOUCHER_WAIT), long enough for a
// race of a few hundred to be answered in full, then gets a 503 with
// Retry-After; never a queue measured in seconds.
type Limiter struct {
	max  int
	wait time.Duration

	mu    sync.Mutex
	slots map[string]*voucherSlots // only vouchers with a request in flight or waiting
}

// voucherSlots are one voucher's slots and how many requests use or wait for them.
type voucherSlots struct {
	ch    chan struct{}
	users int
}

// errVoucherBusy answers a request that found no slot within the wait.
var errVoucherBusy = fmt.Errorf("too many reserves of one voucher at once: %w", voucher.ErrUnavailable)

// maxVoucherWait bounds VOUCHER_WAIT: a request that waits a second for a
// slot already broke the promise that a crowd on one voucher is answered
// within a second at p99.
const maxVoucherWait = time.Second

// CheckVoucherWait refuses a VOUCHER_WAIT that breaks that promise.
func CheckVoucherWait(wait time.Duration) error {
	if wait <= 0 || wait >= maxVoucherWait {
		return fmt.Errorf("VOUCHER_WAIT must be above 0 and below %v (got %v)", maxVoucherWait, wait)
	}
	return nil
}

// NewLimiter returns a Limiter with max slots per voucher and wait for one.
func NewLimiter(max int, wait time.Duration) *Limiter {
	return &Limiter{max: max, wait: wait, slots: map[string]*voucherSlots{}}
}

// Do runs f holding one of code's slots, or answers errVoucherBusy (a 503)
// when none came free within the wait, or the context's error when the caller
// left first. A nil Limiter runs f at once.
func (l *Limiter) Do(ctx context.Context, code string, f func() error) error {
	if l == nil {
		return f()
	}
	s := l.enter(code)
	defer l.leave(code, s)
	select {
	case s.ch <- struct{}{}:
	default:
		t := time.NewTimer(l.wait)
		defer t.Stop()
		select {
		case s.ch <- struct{}{}:
		case <-t.C:
			return fmt.Errorf("reserve %s: no slot within %v: %w", code, l.wait, errVoucherBusy)
		case <-ctx.Done():
			return fmt.Errorf("reserve %s: waiting for a slot: %w: %w", code, ctx.Err(), voucher.ErrUnavailable)
		}
	}
	defer func() { <-s.ch }()
	return f()
}

func (l *Limiter) enter(code string) *voucherSlots {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.slots[code]
	if !ok {
		s = &voucherSlots{ch: make(chan struct{}, l.max)}
		l.slots[code] = s
	}
	s.users++
	return s
}

func (l *Limiter) leave(code string, s *voucherSlots) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.users--; s.users == 0 {
		delete(l.slots, code)
	}
}
