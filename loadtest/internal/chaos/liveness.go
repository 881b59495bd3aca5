package chaos

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/flashgate/flashgate/shared/api"
)

// livenessEvery is how often the harness asks the entry's /healthz while a
// fault lasts: about a hundred answers in a fault of two seconds.
const livenessEvery = 20 * time.Millisecond

// liveness measures what the machine's load costs an answer while a fault
// lasts: a GET /healthz on the clients' entry every livenessEvery, each sent
// on time whatever the earlier ones wait for (open loop, as the burst), until
// stopped. The proxy answers /healthz from memory, with no Redis, ledger or
// Postgres, so its latency is the queueing the machine imposes on every
// request at that moment, the fault's own cost left out.
//
// A fault can take the CPU itself: a Postgres restart on two cores (its
// shutdown, its start, every pool reconnecting) left the CPU idle 0-8% for
// about 3 s, with 429s answered at the proxy's door taking as long as the
// 503s. The answers before the fault do not see that; these do.
type liveness struct {
	url    string
	client *http.Client
	stop   chan struct{}
	sender sync.WaitGroup // the sending loop
	sent   sync.WaitGroup // requests in flight

	mu  sync.Mutex
	lat []time.Duration // of the requests answered 200
}

// startLiveness starts asking entry's /healthz; timeout bounds each request.
func startLiveness(ctx context.Context, entry string, timeout time.Duration) *liveness {
	l := &liveness{url: entry + api.HealthzPath, client: &http.Client{Timeout: timeout}, stop: make(chan struct{})}
	l.sender.Add(1)
	go l.run(ctx)
	return l
}

func (l *liveness) run(ctx context.Context) {
	defer l.sender.Done()
	tick := time.NewTicker(livenessEvery)
	defer tick.Stop()
	for {
		l.sent.Add(1)
		go l.ask(ctx)
		select {
		case <-ctx.Done():
			return
		case <-l.stop:
			return
		case <-tick.C:
		}
	}
}

func (l *liveness) ask(ctx context.Context) {
	defer l.sent.Done()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.url, nil)
	if err != nil {
		return
	}
	start := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		return // the proxy is down (proxy-kill): no answer says nothing of the load
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	took := time.Since(start)
	l.mu.Lock()
	l.lat = append(l.lat, took)
	l.mu.Unlock()
}

// end stops sending; wait returns the latencies once every request sent has
// its answer.
func (l *liveness) end() { close(l.stop) }

func (l *liveness) wait() []time.Duration {
	l.sender.Wait()
	l.sent.Wait()
	l.client.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lat
}
