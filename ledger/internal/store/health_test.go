package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// TestHealthBusyPool: a pool whose every connection is out while work keeps
// going through it is judged ready, mostly without a ping (which would wait
// for a connection behind the work); a pool whose connections are all held
// with no work going through (a hung Postgres looks so) is judged unready
// within the ping's deadline; and a judgement answers for its interval.
func TestHealthBusyPool(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, PoolConfig{URL: devstacktest.PostgresURL(t), MaxConns: 2, Timeout: 5 * time.Second}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	h := s.Health(50 * time.Millisecond)
	if err := h.Check(ctx); err != nil {
		t.Fatalf("Check(idle pool) = %v, want ready", err)
	}
	if err := h.Check(ctx); err != nil || h.Pings() != 1 {
		t.Fatalf("Check(again at once) = %v with %d pings, want the judgement kept (1 ping)", err, h.Pings())
	}

	// Busy with work: four workers on two connections, short statements.
	work, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for work.Err() == nil {
				_, _ = s.pool.Exec(work, `SELECT pg_sleep(0.02)`)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	before, checks := h.Pings(), 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(60 * time.Millisecond) {
		checks++
		if err := h.Check(ctx); err != nil {
			t.Errorf("Check(pool busy with work) = %v, want ready", err)
		}
	}
	busyPings := h.Pings() - before
	stop()
	wg.Wait()
	if busyPings > int64(checks/2) {
		t.Errorf("%d pings for %d judgements of a pool busy with work, want most judged from its counters", busyPings, checks)
	}

	// Held with no work going through: both connections asleep.
	held, release := context.WithCancel(ctx)
	defer release()
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.pool.Exec(held, `SELECT pg_sleep(3)`)
		}()
	}
	time.Sleep(200 * time.Millisecond)
	unready := false
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && !unready; time.Sleep(60 * time.Millisecond) {
		unready = h.Check(ctx) != nil
	}
	release()
	wg.Wait()
	if !unready {
		t.Error("Check(every connection held, nothing going through) = ready, want unready")
	}
	t.Logf("busy with work: %d pings for %d judgements", busyPings, checks)
}
