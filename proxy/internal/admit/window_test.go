package admit

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The window refuses nothing at its most; it shrinks while the writes it
// lets through are slower than the target and it is full, never below
// windowLeast, refusing then, and grows back, never above its most, while
// they are fast and it is full.
func TestAdmitWindowSizes(t *testing.T) {
	now := time.Unix(0, 0)
	w := newAdmitWindow(50*time.Millisecond, 100, nil)
	w.now = func() time.Time { return now }
	w.start = now
	fill := func() int {
		n := 0
		for n < 1000 && take(w) {
			n++
		}
		return n
	}
	require.Equal(t, 1000, fill(), "at its most a full window only watches: MAX_INFLIGHT bounds the proxy")
	for range 3 { // fast writes first, the window full: what a write costs with no queue
		now = now.Add(windowEvery)
		w.leave(5 * time.Millisecond)
		require.True(t, take(w), "at its most it only watches")
	}
	for range 30 { // slow writes, window after window, the window full
		now = now.Add(windowEvery)
		w.leave(200 * time.Millisecond)
		require.False(t, take(w), "still full")
	}
	assert.EqualValues(t, windowLeast, w.limit, "slow writes shrink it to its least")
	for w.inflight > 0 {
		w.leave(0) // ended without a write: no sample
	}
	require.Equal(t, 0, w.inflight)
	for range 5 { // slow writes in a window that never fills: it stays
		require.True(t, take(w))
		now = now.Add(windowEvery)
		w.leave(time.Second)
	}
	assert.EqualValues(t, windowLeast, w.limit, "slow writes in a window that is not full: it stays")
	require.Equal(t, 0, w.inflight)
	assert.Equal(t, windowLeast, fill(), "the least still lets requests in")
	for w.inflight > 0 {
		w.leave(0)
	}
	for range 3 { // fast writes in a window that never fills: it grows back
		require.True(t, take(w))
		now = now.Add(windowEvery)
		w.leave(5 * time.Millisecond)
	}
	assert.Greater(t, w.limit, float64(windowLeast), "fast writes grow a window that a stall shrank, full or not")
	assert.Less(t, w.limit, float64(windowLeast+10), "by a twentieth of itself per window")
	require.Equal(t, 0, w.inflight)
	for range 200 { // fast writes with the window full
		now = now.Add(windowEvery)
		for n := w.inflight; n > 0; n-- {
			w.leave(5 * time.Millisecond)
		}
		fill()
	}
	assert.EqualValues(t, 100, w.limit, "fast writes in a full window grow it back to its most")
}

// A machine slow all along is not a queue: writes that took 80 ms from the
// first one, over a 50 ms target, with the window full, do not shrink it (the
// fastest write is no slower than the floor, and the mean is within three
// times it); once they queue behind each other (the fastest twice the floor)
// and the mean passes three times the floor, they do, in proportion.
func TestAdmitWindowShedsQueuesNotSlowMachines(t *testing.T) {
	now := time.Unix(0, 0)
	w := newAdmitWindow(50*time.Millisecond, 200, nil)
	w.now = func() time.Time { return now }
	w.start, w.epoch = now, now
	w.limit, w.inflight = 64, 1000 // shrunk before, and full: it refuses
	// Slow writes, not queued.
	for range 5 {
		now = now.Add(windowEvery)
		w.leave(80 * time.Millisecond)
		require.False(t, take(w), "still full")
	}
	assert.GreaterOrEqual(t, w.limit, 64.0, "a slow machine's writes, no queue: the window does not shrink")
	before := w.limit
	now = now.Add(windowEvery)
	w.leave(400 * time.Millisecond) // the fastest of the window at 5x the floor, the mean at 5x
	assert.InDelta(t, before*240/400, w.limit, 0.01, "a standing queue: shrunk by target/mean (target 3 x 80 ms)")
}

// The target grows with the floor: where a write costs 20 ms with no queue
// (a slow machine, a network between the services), a mean of 50 ms is
// within three times that, and a queue of it does not shrink the window
// (over a 10 ms ADMIT_WRITE_TARGET); a mean of 90 ms is not, and does.
func TestAdmitWindowTargetFollowsTheFloor(t *testing.T) {
	now := time.Unix(0, 0)
	w := newAdmitWindow(10*time.Millisecond, 100, nil)
	w.now = func() time.Time { return now }
	w.start, w.epoch = now, now
	w.limit, w.inflight = 64, 1000
	step := func(wrote time.Duration) {
		now = now.Add(windowEvery)
		w.leave(wrote)
		require.False(t, take(w), "still full")
	}
	step(20 * time.Millisecond) // the floor
	step(50 * time.Millisecond)
	assert.GreaterOrEqual(t, w.limit, 64.0, "queued, under 3 x the floor: the window does not shrink")
	before := w.limit
	step(90 * time.Millisecond)
	assert.InDelta(t, before*60/90, w.limit, 0.01, "over 3 x the floor: shrunk by target/mean")
}

// take is a request the window lets in that the gate admits.
func take(w *admitWindow) bool {
	if !w.open() {
		return false
	}
	w.enter()
	return true
}

// Many goroutines at once, each checking and entering apart (as a request
// does, with the gate's round in between): the window lets in at most its
// limit plus the requests that checked together, and every place taken is
// given back.
func TestAdmitWindowConcurrent(t *testing.T) {
	w := newAdmitWindow(time.Hour, 32, nil)
	var mu sync.Mutex
	in, most, refused := 0, 0, 0
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				if !take(w) {
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				mu.Lock()
				in++
				most = max(most, in)
				mu.Unlock()
				time.Sleep(10 * time.Microsecond)
				mu.Lock()
				in--
				mu.Unlock()
				w.leave(time.Millisecond)
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most, 32+64, "at most the limit plus one check per goroutine")
	assert.Equal(t, 0, w.inflight)
	t.Logf("most in at once %d, refused %d of %d", most, refused, 64*200)
}

// A full window refuses new orders at the door, but never a retry of an order
// that holds its use in Redis: it takes no new use, and gets its 201
// replayed. The same orderId from another customer holds nothing of theirs:
// refused as a new order would be.
func TestFullWindowLetsHeldRetriesThrough(t *testing.T) {
	k := newKit(t, 2*time.Second)
	code := k.createVoucher(t, 10)
	require.Equal(t, "201", status(k.reserve(code, 1, code+"-a")))

	w := newAdmitWindow(10*time.Millisecond, 2*windowLeast, nil)
	w.limit, w.inflight = windowLeast, 10*windowLeast // shrunk by slow writes, and full
	k.a.window = w
	t.Cleanup(func() { w.mu.Lock(); w.inflight = 0; w.mu.Unlock() })

	r, err := k.reserve(code, 1, code+"-a")
	require.NoError(t, err)
	assert.Equal(t, 201, r.Status, "a retry of a held order: %s", r.Body)
	assert.True(t, r.Replayed, "answered from its row")
	assert.Equal(t, "503", status(k.reserve(code, 2, code+"-b")), "a new order at a full window")
	assert.Equal(t, "503", status(k.reserve(code, 3, code+"-a")), "the held orderId from another customer")
	assert.EqualValues(t, 1, w.spared.Load())
	assert.EqualValues(t, 2, w.shed.Load())
}
