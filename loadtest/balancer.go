package main

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// balancer spreads TCP connections round-robin over backends and skips one
// that refuses, as a load balancer in front of several ledgers would.
type balancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64

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
	b := &balancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// Addr is where the balancer listens.
func (b *balancer) Addr() string { return b.ln.Addr().String() }

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go b.handle(c)
	}
}

func (b *balancer) handle(c net.Conn) {
	defer b.wg.Done()
	var up net.Conn
	first := b.next.Add(1)
	for i := range len(b.backends) {
		addr := b.backends[(first+uint64(i))%uint64(len(b.backends))]
		var err error
		if up, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
			break
		}
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
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
