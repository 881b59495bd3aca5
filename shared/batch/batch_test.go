package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Many goroutines, one key: every item gets its own result, calls never
// overlap for a key, and waiting items are batched.
func TestBatchesUnderLoad(t *testing.T) {
	var inFlight, overlaps, calls, items atomic.Int64
	var maxBatch atomic.Int64
	b := New(context.Background(), 64, func(ctx context.Context, key string, xs []int) ([]int, error) {
		if inFlight.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inFlight.Add(-1)
		calls.Add(1)
		items.Add(int64(len(xs)))
		for old := maxBatch.Load(); int64(len(xs)) > old && !maxBatch.CompareAndSwap(old, int64(len(xs))); old = maxBatch.Load() {
		}
		time.Sleep(time.Millisecond) // a round trip
		out := make([]int, len(xs))
		for i, x := range xs {
			out[i] = x * 2
		}
		return out, nil
	})
	const n = 2000
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := b.Do(context.Background(), "k", i)
			if err != nil || got != i*2 {
				t.Errorf("Do(%d) = %d, %v, want %d", i, got, err, i*2)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two calls in flight for one key")
	assert.EqualValues(t, n, items.Load())
	assert.Less(t, calls.Load(), int64(n/4), "items were not batched")
	assert.LessOrEqual(t, maxBatch.Load(), int64(64), "cap exceeded")
}

// A lone item goes at once: no timer holds it back.
func TestLoneItemGoesAtOnce(t *testing.T) {
	b := New(context.Background(), 10, func(ctx context.Context, key string, xs []int) ([]int, error) {
		return xs, nil
	})
	start := time.Now()
	for i := 0; i < 100; i++ {
		got, err := b.Do(context.Background(), "k", i)
		require.NoError(t, err)
		require.Equal(t, i, got)
	}
	assert.Less(t, time.Since(start), time.Second)
}

// Keys batch independently: a slow key does not hold another back.
func TestKeysAreIndependent(t *testing.T) {
	release := make(chan struct{})
	b := New(context.Background(), 10, func(ctx context.Context, key string, xs []int) ([]int, error) {
		if key == "slow" {
			<-release
		}
		return xs, nil
	})
	go b.Do(context.Background(), "slow", 1)
	got, err := b.Do(context.Background(), "fast", 2)
	require.NoError(t, err)
	assert.Equal(t, 2, got)
	close(release)
}

// An error fails every item of its batch; a wrong result count and a panic
// are errors too, never a hang.
func TestErrorsReachEveryWaiter(t *testing.T) {
	boom := errors.New("boom")
	for name, fn := range map[string]Func[string, int, int]{
		"error": func(context.Context, string, []int) ([]int, error) { return nil, boom },
		"short": func(context.Context, string, []int) ([]int, error) { return []int{}, nil },
		"panic": func(context.Context, string, []int) ([]int, error) { panic("bad") },
	} {
		t.Run(name, func(t *testing.T) {
			b := New(context.Background(), 10, fn)
			var wg sync.WaitGroup
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := b.Do(context.Background(), "k", i)
					assert.Error(t, err)
				}()
			}
			wg.Wait()
		})
	}
}

// A caller whose context ends stops waiting; an item still queued when its
// caller left is dropped from the batch.
func TestCancelledCallers(t *testing.T) {
	gate := make(chan struct{})
	var seen sync.Map
	b := New(context.Background(), 10, func(ctx context.Context, key string, xs []int) ([]int, error) {
		for _, x := range xs {
			seen.Store(x, true)
		}
		if xs[0] == 0 {
			<-gate
		}
		return xs, nil
	})
	first := make(chan error)
	go func() { _, err := b.Do(context.Background(), "k", 0); first <- err }()
	time.Sleep(20 * time.Millisecond) // item 0's call is in flight
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan error)
	go func() { _, err := b.Do(ctx, "k", 1); queued <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	err := <-queued
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrDropped)
	close(gate)
	require.NoError(t, <-first)
	got, err := b.Do(context.Background(), "k", 2)
	require.NoError(t, err)
	assert.Equal(t, 2, got)
	_, ran := seen.Load(1)
	assert.False(t, ran, "a cancelled queued item was still run")
}

// A caller whose context ends while its item's batch runs still gets what
// the batch did for it: an item is either run and its result delivered, or
// never run. Many callers cancel at random moments against batches starting;
// every item that ran was answered with its result, and none of those that
// were answered with their context's error ran.
func TestCancelDuringBatchGetsItsResult(t *testing.T) {
	release := make(chan struct{})
	b := New(context.Background(), 1, func(ctx context.Context, key string, xs []int) ([]int, error) {
		if xs[0] == -1 {
			<-release
		}
		return xs, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan error)
	go func() { _, err := b.Do(ctx, "held", -1); held <- err }()
	time.Sleep(20 * time.Millisecond) // item -1's batch is running
	cancel()
	select {
	case err := <-held:
		t.Fatalf("Do returned %v while its batch still ran", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	assert.NoError(t, <-held, "Do of an item whose batch ran")

	var ran sync.Map
	race := New(context.Background(), 4, func(ctx context.Context, key string, xs []int) ([]int, error) {
		for _, x := range xs {
			ran.Store(x, true)
		}
		time.Sleep(time.Millisecond)
		return xs, nil
	})
	const n = 2000
	answered := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%7)*time.Millisecond)
			defer cancel()
			got, err := race.Do(ctx, "k", i)
			if err == nil && got != i {
				err = fmt.Errorf("got %d", got)
			}
			answered[i] = err
		}()
	}
	wg.Wait()
	var dropped int
	for i, err := range answered {
		_, didRun := ran.Load(i)
		switch {
		case err == nil:
			assert.True(t, didRun, "item %d answered without running", i)
		case errors.Is(err, context.DeadlineExceeded):
			dropped++
			assert.False(t, didRun, "item %d ran but its caller got %v", i, err)
		default:
			t.Errorf("item %d: %v", i, err)
		}
	}
	t.Logf("%d of %d items dropped before their batch", dropped, n)
}

func BenchmarkDo(b *testing.B) {
	bt := New(context.Background(), 256, func(ctx context.Context, key string, xs []int) ([]int, error) {
		return xs, nil
	})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = bt.Do(context.Background(), "k", 1)
		}
	})
}

// DoAll's items travel together: one call when they fit under the cap.
func TestDoAllGoesTogether(t *testing.T) {
	var calls atomic.Int64
	b := New(context.Background(), 100, func(ctx context.Context, key string, xs []int) ([]int, error) {
		calls.Add(1)
		return xs, nil
	})
	rs, errs := b.DoAll(context.Background(), "k", []int{1, 2, 3, 4, 5})
	for i, err := range errs {
		require.NoError(t, err)
		assert.Equal(t, i+1, rs[i])
	}
	assert.EqualValues(t, 1, calls.Load())
}

// GoAll's items travel together too, each answered through its own Then.
func TestGoAllGoesTogether(t *testing.T) {
	var calls atomic.Int64
	b := New(context.Background(), 100, func(ctx context.Context, key string, xs []int) ([]int, error) {
		calls.Add(1)
		return xs, nil
	})
	got := make(chan [2]int, 5)
	var cs []Call[int, int]
	for i := 1; i <= 5; i++ {
		cs = append(cs, Call[int, int]{Ctx: context.Background(), Item: i, Then: func(r int, err error) {
			assert.NoError(t, err)
			got <- [2]int{i, r}
		}})
	}
	b.GoAll("k", cs)
	for range 5 {
		g := <-got
		assert.Equal(t, g[0], g[1], "GoAll(%d) = %d, want %d", g[0], g[1], g[0])
	}
	assert.EqualValues(t, 1, calls.Load())
}

// With CallerDeadlines, a caller's deadline bounds its whole wait: a batch
// gets the earliest deadline of its items, and an item still queued at its
// deadline is dropped (ErrDropped). Without it, a call's context has no
// deadline of its callers.
func TestCallerDeadlines(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("on=%v", on), func(t *testing.T) {
			gate := make(chan struct{})
			deadlines := make(chan time.Time, 4)
			b := New(context.Background(), 10, func(ctx context.Context, key string, xs []int) ([]int, error) {
				d, _ := ctx.Deadline()
				deadlines <- d
				if xs[0] == 0 {
					<-gate
				}
				return xs, nil
			})
			if on {
				b.CallerDeadlines()
			}
			first := make(chan error, 1)
			go func() { _, err := b.Do(context.Background(), "k", 0); first <- err }()
			assert.True(t, (<-deadlines).IsZero(), "no caller deadline, none on the call")

			// Queued behind the call in flight: one item with a near deadline
			// (dropped while queued), two with later ones (batched together).
			near, cancelNear := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancelNear()
			soon, cancelSoon := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancelSoon()
			late, cancelLate := context.WithTimeout(context.Background(), time.Minute)
			defer cancelLate()
			dropped := make(chan error, 1)
			go func() { _, err := b.Do(near, "k", 1); dropped <- err }()
			results := make(chan error, 2)
			time.Sleep(10 * time.Millisecond)
			go func() { _, err := b.Do(soon, "k", 2); results <- err }()
			go func() { _, err := b.Do(late, "k", 3); results <- err }()
			err := <-dropped
			assert.ErrorIs(t, err, ErrDropped)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			time.Sleep(20 * time.Millisecond) // both later items queued
			close(gate)
			require.NoError(t, <-first)
			require.NoError(t, <-results)
			require.NoError(t, <-results)
			d := <-deadlines
			if !on {
				assert.True(t, d.IsZero(), "the call took a caller's deadline")
				return
			}
			want, _ := soon.Deadline()
			assert.Equal(t, want, d, "the batch's deadline is its earliest item's")
		})
	}
}

// Go hands each item's result to its then, once, from the goroutine that ran
// its batch, without the caller waiting: a then that queues the item's next
// stage chains two batchers, and the caller waits once, for the last.
func TestGoChainsStages(t *testing.T) {
	double := New(context.Background(), 16, func(ctx context.Context, key string, xs []int) ([]int, error) {
		out := make([]int, len(xs))
		for i, x := range xs {
			out[i] = 2 * x
		}
		return out, nil
	})
	var plusCalls atomic.Int64
	plus := New(context.Background(), 16, func(ctx context.Context, key string, xs []int) ([]int, error) {
		plusCalls.Add(1)
		out := make([]int, len(xs))
		for i, x := range xs {
			out[i] = x + 1
		}
		return out, nil
	})
	const n = 500
	got := make(chan [2]int, n)
	var calls sync.Map // item -> how many times its last then ran
	for i := 0; i < n; i++ {
		double.Go(context.Background(), "k", i, func(r int, err error) {
			assert.NoError(t, err)
			plus.Go(context.Background(), "k", r, func(r int, err error) {
				assert.NoError(t, err)
				c, _ := calls.LoadOrStore(i, new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
				got <- [2]int{i, r}
			})
		})
	}
	for range n {
		select {
		case g := <-got:
			assert.Equal(t, 2*g[0]+1, g[1], "Go(%d) = %d, want %d", g[0], g[1], 2*g[0]+1)
		case <-time.After(30 * time.Second):
			t.Fatal("an item's then never ran")
		}
	}
	calls.Range(func(k, v any) bool {
		assert.EqualValues(t, 1, v.(*atomic.Int64).Load(), "item %v's then ran more than once", k)
		return true
	})
	assert.LessOrEqual(t, plusCalls.Load(), int64(n))
}

// An item queued with Go whose caller abandons it while it waits behind the
// call in flight is never run, and its then is not called; one whose context
// ended before its batch took it is never run either, and its then gets
// ErrDropped and the context's error. Once its batch took it, Abandon leaves
// it to then.
func TestGoDropsQueuedItems(t *testing.T) {
	gate, started := make(chan struct{}), make(chan struct{})
	var seen sync.Map
	b := New(context.Background(), 10, func(ctx context.Context, key string, xs []int) ([]int, error) {
		for _, x := range xs {
			seen.Store(x, true)
		}
		if xs[0] == 0 {
			close(started)
			<-gate
		}
		return xs, nil
	})
	first := make(chan error, 1)
	t0 := b.Go(context.Background(), "k", 0, func(_ int, err error) { first <- err })
	<-started // item 0's call is in flight: what comes next queues behind it
	assert.NoError(t, t0.Abandon(), "an item its batch took was abandoned")
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	t1 := b.Go(ctx, "k", 1, func(int, error) { calls.Add(1) })
	cancel()
	err := t1.Abandon()
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrDropped)
	late := make(chan error, 1)
	b.Go(ctx, "k", 2, func(_ int, err error) { late <- err })
	close(gate)
	require.NoError(t, <-first)
	assert.ErrorIs(t, <-late, ErrDropped)
	got, err := b.Do(context.Background(), "k", 3)
	require.NoError(t, err)
	assert.Equal(t, 3, got)
	assert.Zero(t, calls.Load(), "an abandoned item's then was called")
	for _, x := range []int{1, 2} {
		_, ran := seen.Load(x)
		assert.False(t, ran, "Go(%d): a dropped item was still run", x)
	}
}
