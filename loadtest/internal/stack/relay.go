package stack

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Relay is a TCP relay on a free loopback port: each connection it accepts is
// joined to one that its dial opens, and its pipe copies each direction. The
// chaos harness's balancer (dial: the next ready backend) and DelayLink
// (pipe: every chunk held for a while) are Relays.
type Relay struct {
	ln   net.Listener
	dial func() net.Conn         // nil: the accepted connection is refused
	pipe func(dst, src net.Conn) // copies src to dst until either fails
	stop chan struct{}

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartRelay listens on a free loopback port and relays what it accepts.
func StartRelay(name string, dial func() net.Conn, pipe func(dst, src net.Conn)) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return RelayOn(ln, dial, pipe), nil
}

// RelayOn is StartRelay on a listener of the caller's.
func RelayOn(ln net.Listener, dial func() net.Conn, pipe func(dst, src net.Conn)) *Relay {
	r := &Relay{ln: ln, dial: dial, pipe: pipe, stop: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r
}

// Copy is the plain pipe: src copied to dst as it comes.
func Copy(dst, src net.Conn) { _, _ = io.Copy(dst, src) }

// Addr is where the relay listens.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Close stops accepting, cuts every connection and waits for the copies.
func (r *Relay) Close() {
	r.ln.Close()
	r.mu.Lock()
	if !r.closed {
		close(r.stop)
	}
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// serve accepts until the listener is closed. Any other accept error (the
// process out of file descriptors while thousands of clients reconnect after a
// kill) is waited out, as net/http's Server does, from 5 ms doubling to 1 s: a
// relay that stopped accepting at the first EMFILE would take the whole fleet
// behind it down (a soak on 2026-11-30 lost every request after round 4 so).
func (r *Relay) serve() {
	defer r.wg.Done()
	var wait time.Duration
	for {
		c, err := r.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			select {
			case <-r.stop:
				return
			case <-time.After(wait):
			}
			continue
		}
		wait = 0
		r.wg.Add(1)
		go r.handle(c)
	}
}

// handle joins c to a connection of dial's until either side ends.
func (r *Relay) handle(c net.Conn) {
	defer r.wg.Done()
	up := r.dial()
	if up == nil || !r.track(c, up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	go func() { r.pipe(up, c); done <- struct{}{} }()
	go func() { r.pipe(c, up); done <- struct{}{} }()
	<-done // either side ended: end both, as a proxy does
	c.Close()
	up.Close()
	<-done
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, up)
	r.mu.Unlock()
}

func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}
