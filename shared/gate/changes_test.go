package gate

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// watcher runs WatchChanges on its own named connection and records the codes.
type watcher struct {
	name string
	mu   sync.Mutex
	seen map[string]int
	done chan struct{}
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startWatcher(t *testing.T, ctx context.Context) *watcher {
	t.Helper()
	opt, err := redis.ParseURL(devstacktest.RedisURL(t))
	require.NoError(t, err)
	w := &watcher{name: fmt.Sprintf("watch-%d", time.Now().UnixNano()), seen: map[string]int{},
		done: make(chan struct{}), logs: &syncBuffer{}}
	opt.ClientName = w.name
	sub := redis.NewClient(opt)
	t.Cleanup(func() { _ = sub.Close() })
	go func() {
		defer close(w.done)
		WatchChanges(ctx, sub, func(code string) {
			w.mu.Lock()
			w.seen[code]++
			w.mu.Unlock()
		}, slog.New(slog.NewTextHandler(w.logs, nil)))
	}()
	return w
}

func (w *watcher) count(code string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[code]
}

// publishUntilSeen publishes code until w has seen it: a subscription that
// is (re)connecting misses what was published before it was in place.
func publishUntilSeen(t *testing.T, rdb *redis.Client, w *watcher, code string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.count(code) == 0 {
		require.NoError(t, PublishChange(context.Background(), rdb, code))
		require.True(t, time.Now().Before(deadline), "%s never saw %s", w.name, code)
		time.Sleep(20 * time.Millisecond)
	}
}

func TestChangesRoundTrip(t *testing.T) {
	t.Parallel()
	rdb := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatcher(t, ctx)

	publishUntilSeen(t, rdb, w, "CHG-first")
	// Delivery is in order: once a marker is seen, no earlier publish is in flight.
	require.NoError(t, PublishChange(ctx, rdb, "CHG-marker"))
	require.Eventually(t, func() bool { return w.count("CHG-marker") == 1 }, 5*time.Second, 5*time.Millisecond)
	// Once subscribed, every publish is delivered once.
	before := w.count("CHG-first")
	for range 5 {
		require.NoError(t, PublishChange(ctx, rdb, "CHG-first"))
	}
	require.NoError(t, PublishChange(ctx, rdb, "CHG-second"))
	require.Eventually(t, func() bool { return w.count("CHG-second") == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, before+5, w.count("CHG-first"), "messages are delivered in order, each once")

	// A message that is not a code is logged and skipped.
	require.NoError(t, rdb.Publish(ctx, ChangesChannel, "not a code}").Err())
	require.NoError(t, PublishChange(ctx, rdb, "CHG-third"))
	require.Eventually(t, func() bool { return w.count("CHG-third") == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Zero(t, w.count("not a code}"))
	assert.Contains(t, w.logs.String(), "invalid code")

	assert.Error(t, PublishChange(ctx, rdb, "bad:code"), "an invalid code is not published")

	cancel()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		t.Fatal("WatchChanges did not return when its context ended")
	}
}

// The subscription survives its connection being killed: go-redis reconnects
// and resubscribes, and later messages arrive again.
func TestChangesSurviveReconnect(t *testing.T) {
	t.Parallel()
	rdb := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatcher(t, ctx)
	publishUntilSeen(t, rdb, w, "CHG-before")

	for round := range 2 {
		list, err := rdb.ClientList(ctx).Result()
		require.NoError(t, err)
		m := regexp.MustCompile(`(?m)^id=(\d+) .*name=` + w.name + ` `).FindStringSubmatch(list)
		require.NotNil(t, m, "no connection named %s in\n%s", w.name, list)
		require.NoError(t, rdb.Do(ctx, "CLIENT", "KILL", "ID", m[1]).Err())
		publishUntilSeen(t, rdb, w, fmt.Sprintf("CHG-after-%d", round))
	}
	select {
	case <-w.done:
		t.Fatal("WatchChanges returned after a lost connection")
	default:
	}
	cancel()
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		t.Fatal("WatchChanges did not return when its context ended")
	}
}

// A stop does not wait out the receive in progress: Run returns when its
// context ends, well before the receive's own timeout (watchHealthCheck),
// which every service's shutdown and every test's cleanup would wait.
func TestWatcherStopsAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatcher(t, ctx)
	rdb := newClient(t)
	publishUntilSeen(t, rdb, w, "CHG-stop") // subscribed, and waiting in a receive
	start := time.Now()
	cancel()
	select {
	case <-w.done:
		t.Logf("returned %s after its context ended", time.Since(start))
	case <-time.After(watchHealthCheck * 9 / 10):
		t.Fatalf("Run did not return within %s of its context's end: it waited out its receive", watchHealthCheck*9/10)
	}
}

// TestWatcherSync: a Sync called after a publish returns only once that
// publish was delivered, however slow the delivery: 20 codes published, each
// taking the watcher 5 ms to handle, are all handled when a Sync started
// right after them returns; 64 concurrent Syncs all return, sharing pings
// (fewer rounds than callers). After the subscription's connection is killed,
// Sync still works once go-redis has resubscribed.
func TestWatcherSync(t *testing.T) {
	t.Parallel()
	rdb := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opt, err := redis.ParseURL(devstacktest.RedisURL(t))
	require.NoError(t, err)
	name := fmt.Sprintf("sync-%d", time.Now().UnixNano())
	opt.ClientName = name
	sub := redis.NewClient(opt)
	t.Cleanup(func() { _ = sub.Close() })
	var seen atomic.Int64 // of this test's codes: other tests publish on the channel too
	prefix := fmt.Sprintf("SYNC%d-", time.Now().UnixNano()%1e9)
	w := NewWatcher(sub, func(code string) {
		time.Sleep(5 * time.Millisecond)
		if strings.HasPrefix(code, prefix) {
			seen.Add(1)
		}
	}, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	require.Eventually(t, func() bool { return w.Sync(ctx) == nil }, 5*time.Second, 10*time.Millisecond, "subscribed")

	for i := range 20 {
		require.NoError(t, PublishChange(ctx, rdb, fmt.Sprintf("%s%d", prefix, i)))
	}
	assert.Less(t, seen.Load(), int64(20), "the watcher is slower than the publishes (else this test proves nothing)")
	require.NoError(t, w.Sync(ctx))
	assert.Equal(t, int64(20), seen.Load(), "every code published before Sync was handled when it returned")

	before := w.rounds.Load()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
			defer scancel()
			if w.Sync(sctx) != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, failed.Load())
	assert.Less(t, w.rounds.Load()-before, uint64(64), "concurrent callers share pings")

	list, err := rdb.ClientList(ctx).Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^id=(\d+) .*name=` + name + ` `).FindStringSubmatch(list)
	require.NotNil(t, m, "no connection named %s", name)
	require.NoError(t, rdb.Do(ctx, "CLIENT", "KILL", "ID", m[1]).Err())
	require.Eventually(t, func() bool {
		sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer scancel()
		if w.Sync(sctx) != nil {
			return false
		}
		n := seen.Load()
		require.NoError(t, PublishChange(ctx, rdb, prefix+"after"))
		return w.Sync(sctx) == nil && seen.Load() == n+1
	}, 10*time.Second, 50*time.Millisecond, "Sync after a reconnect")
	cancel()
	<-done
}

// PublishChange takes the Publish method alone and WatchChanges the Subscribe
// method alone: a redis.UniversalClient (single or cluster) satisfies both.
var (
	_ Publisher  = redis.UniversalClient(nil)
	_ Subscriber = redis.UniversalClient(nil)
)
