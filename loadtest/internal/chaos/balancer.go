package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/shared/api"
)

// readyEvery is how often a balancer that follows readiness asks each backend's
// /readyz: a load balancer's health check, fast enough that a SHUTDOWN_DELAY of
// a second moves new connections away.
const readyEvery = 100 * time.Millisecond

// balancer spreads TCP connections round-robin over backends and skips one
// that refuses, as a load balancer in front of several ledgers would. Once
// told to follow readiness, it also skips a backend whose /readyz does not
// answer 200 (unless none does); connections already open stay where they are,
// as behind a Kubernetes Service.
type balancer struct {
	*stack.Relay
	backends []string
	ready    []atomic.Bool
	next     atomic.Uint64
	stop     chan struct{} // ends the readiness checks
	stopOnce sync.Once
	wg       sync.WaitGroup // the readiness checks
}

func startBalancer(backends ...string) (*balancer, error) {
	b := &balancer{backends: backends, ready: make([]atomic.Bool, len(backends)), stop: make(chan struct{})}
	for i := range b.ready {
		b.ready[i].Store(true)
	}
	var err error
	b.Relay, err = stack.StartRelay("balancer", b.pick, stack.Copy)
	return b, err
}

// followReadiness starts asking every backend's /readyz each readyEvery.
func (b *balancer) followReadiness() {
	client := &http.Client{Timeout: 500 * time.Millisecond}
	for i, addr := range b.backends {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			tick := time.NewTicker(readyEvery)
			defer tick.Stop()
			for {
				b.ready[i].Store(isReady(client, "http://"+addr+api.ReadyzPath))
				select {
				case <-b.stop:
					return
				case <-tick.C:
				}
			}
		}()
	}
}

func isReady(client *http.Client, url string) bool {
	resp, err := client.Get(url)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitReady waits until the balancer has seen addr ready, up to bound.
func (b *balancer) waitReady(ctx context.Context, addr string, bound time.Duration) error {
	for end := time.Now().Add(bound); ; {
		for i, a := range b.backends {
			if a == addr && b.ready[i].Load() {
				return nil
			}
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("balancer: %s not ready within %s", addr, bound)
		}
		load.Sleep(ctx, readyEvery)
	}
}

// pick connects to the next ready backend that accepts; with none, to any
// that does, as a balancer that fails open.
func (b *balancer) pick() net.Conn {
	if up := b.dial(true); up != nil {
		return up
	}
	return b.dial(false)
}

// dial connects to the next backend that accepts, among the ready ones only
// when readyOnly.
func (b *balancer) dial(readyOnly bool) net.Conn {
	first := b.next.Add(1)
	for i := range len(b.backends) {
		k := (first + uint64(i)) % uint64(len(b.backends))
		if readyOnly && !b.ready[k].Load() {
			continue
		}
		if up, err := net.DialTimeout("tcp", b.backends[k], time.Second); err == nil {
			return up
		}
	}
	return nil
}

// Close stops the relay (every connection cut) and the readiness checks.
func (b *balancer) Close() {
	if b.Relay != nil {
		b.Relay.Close()
	}
	b.stopOnce.Do(func() { close(b.stop) })
	b.wg.Wait()
}
