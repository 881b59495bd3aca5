package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
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
	ln       net.Listener
	backends []string
	ready    []atomic.Bool
	next     atomic.Uint64
	stop     chan struct{}

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func startBalancer(backends ...string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("balancer: %w", err)
	}
	b := &balancer{ln: ln, backends: backends, ready: make([]atomic.Bool, len(backends)),
		conns: map[net.Conn]struct{}{}, stop: make(chan struct{})}
	for i := range b.ready {
		b.ready[i].Store(true)
	}
	b.wg.Add(1)
	go b.serve()
	return b, nil
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

// Addr is where the balancer listens.
func (b *balancer) Addr() string { return b.ln.Addr().String() }

// serve accepts until the listener is closed. Any other accept error (the
// process out of file descriptors while thousands of clients reconnect after a
// kill) is waited out, as net/http's Server does, from 5 ms doubling to 1 s: a
// balancer that stopped accepting at the first EMFILE would take the whole
// fleet down with it (a soak on 2026-11-30 lost every request after round 4 so).
func (b *balancer) serve() {
	defer b.wg.Done()
	var wait time.Duration
	for {
		c, err := b.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			select {
			case <-b.stop:
				return
			case <-time.After(wait):
			}
			continue
		}
		wait = 0
		b.wg.Add(1)
		go b.handle(c)
	}
}

func (b *balancer) handle(c net.Conn) {
	defer b.wg.Done()
	up := b.dial(true)
	if up == nil {
		up = b.dial(false) // no ready backend: try them all, as a balancer that fails open
	}
	if up == nil || !b.track(c, up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done // either side ended: end both, as a proxy does
	c.Close()
	up.Close()
	<-done
	b.mu.Lock()
	delete(b.conns, c)
	delete(b.conns, up)
	b.mu.Unlock()
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

func (b *balancer) track(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	for _, c := range cs {
		b.conns[c] = struct{}{}
	}
	return true
}

// Close stops accepting, cuts every connection and waits for the copies.
func (b *balancer) Close() {
	b.ln.Close()
	b.mu.Lock()
	if !b.closed {
		close(b.stop)
	}
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
