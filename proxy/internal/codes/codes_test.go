package codes

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVoucherCodesReadOncePerInterval: 200 goroutines missing the set at once
// make one read of it; misses within the interval make none (and are
// answered 404), the first miss past it makes exactly one; a code published
// while a read is under way is kept when the read's older result lands.
func TestVoucherCodesReadOncePerInterval(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	var reads atomic.Int64
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	codes := []string{"A"}
	var mu sync.Mutex
	load := func(context.Context) ([]string, error) {
		reads.Add(1)
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), codes...), nil
	}
	vc := New(load, time.Second, time.Second, func() time.Time { return time.Unix(0, now.Load()) }, slog.New(slog.DiscardHandler))
	close(release)
	require.NoError(t, vc.Load(context.Background()))
	require.Equal(t, int64(1), reads.Load())

	miss := func(n int, code string) (found int64) {
		var wg sync.WaitGroup
		var hits atomic.Int64
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if vc.Has(context.Background(), code) {
					hits.Add(1)
				}
			}()
		}
		wg.Wait()
		return hits.Load()
	}
	mu.Lock()
	codes = append(codes, "B") // created, its publish lost
	mu.Unlock()
	assert.Equal(t, int64(0), miss(200, "B"), "within the interval B is unknown")
	assert.Equal(t, int64(1), reads.Load(), "reads within the interval")
	assert.Equal(t, int64(200), vc.Unknown())

	now.Add(int64(time.Second))
	assert.Equal(t, int64(200), miss(200, "B"), "past the interval the first miss re-reads and finds B")
	assert.Equal(t, int64(2), reads.Load(), "200 misses past the interval make one read")
	assert.Equal(t, int64(0), miss(200, "C"))
	assert.Equal(t, int64(2), reads.Load())
	assert.Equal(t, int64(200), miss(200, "A"), "known codes are found without a read")
	assert.Equal(t, int64(2), reads.Load())

	// A code published while a read runs survives the read's older result.
	release = make(chan struct{})
	select {
	case <-entered: // the earlier reads'
	default:
	}
	now.Add(int64(time.Second))
	done := make(chan bool)
	go func() { done <- vc.Has(context.Background(), "D") }()
	<-entered
	vc.Add("E")
	close(release)
	assert.False(t, <-done)
	assert.True(t, vc.Has(context.Background(), "E"), "E was published during the read")
	assert.Equal(t, 3, vc.Size()) // A, B, E
}

// missSet is a loaded set of one code whose sync answers at once (a change
// channel with nothing pending), never due for a re-read.
func missSet(tb testing.TB) *Set {
	tb.Helper()
	s := New(func(context.Context) ([]string, error) { return []string{"KNOWN"}, nil }, time.Hour, time.Second,
		nil, slog.New(slog.DiscardHandler))
	require.NoError(tb, s.Load(tb.Context()))
	s.SyncWith(func(ctx context.Context) error { return ctx.Err() })
	return s
}

// TestMissAllocatesNothing: a made-up code, answered after its sync with the
// change channel, allocates nothing once a first miss made the shared bound:
// a flood of made-up codes costs no timer and no context per request.
func TestMissAllocatesNothing(t *testing.T) {
	s := missSet(t) // not parallel: AllocsPerRun counts the whole process's
	ctx := t.Context()
	require.False(t, s.Has(ctx, "NOPE"))
	if allocs := testing.AllocsPerRun(200, func() { s.Has(ctx, "NOPE") }); allocs != 0 {
		t.Errorf("Has(NOPE) = %v allocations per miss, want 0", allocs)
	}
	assert.True(t, s.Has(ctx, "KNOWN"))
	assert.Equal(t, int64(202), s.Unknown())
}

// TestMissSyncBound: a miss syncs under a deadline within syncWait, at most
// 1/8 of it used up by the misses before it, and not the request's own.
func TestMissSyncBound(t *testing.T) {
	t.Parallel()
	var left []time.Duration
	s := missSet(t)
	s.SyncWith(func(ctx context.Context) error {
		dl, ok := ctx.Deadline()
		require.True(t, ok, "the sync has a deadline")
		require.NoError(t, ctx.Err(), "the sync's context")
		left = append(left, time.Until(dl))
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the client left: its miss still syncs
	for range 3 {
		require.False(t, s.Has(ctx, "NOPE"))
	}
	require.Len(t, left, 3)
	for _, d := range left {
		assert.True(t, d > time.Second*7/8-100*time.Millisecond && d <= time.Second, "time left %s, want about 7/8 to 1 of 1s", d)
	}
}

// BenchmarkHasMiss: a made-up code answered after its sync (one that answers
// at once), the proxy's whole cost of a junk reserve's lookup.
func BenchmarkHasMiss(b *testing.B) {
	s := missSet(b)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if s.Has(ctx, "NOPE") {
			b.Fatal("Has(NOPE) = true")
		}
	}
}
