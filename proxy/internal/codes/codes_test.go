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
