package stack

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"
)

// DelayLink is a TCP forwarder that holds every chunk it relays for a fixed
// time in each direction, in order: a network hop with latency, on loopback.
// toxiproxy's latency toxic takes whole milliseconds; a datacentre hop is a
// fraction of one, and that fraction is what the stack's figures are to be
// read against.
type DelayLink struct {
	ln       net.Listener
	upstream string
	delay    time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartDelayLink listens on a free loopback port and relays each connection to
// upstream (host:port), delay added each way.
func StartDelayLink(upstream string, delay time.Duration) (*DelayLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delay link to %s: %w", upstream, err)
	}
	l := &DelayLink{ln: ln, upstream: upstream, delay: delay, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Addr is where the link listens.
func (l *DelayLink) Addr() string { return l.ln.Addr().String() }

// Close stops accepting, cuts every connection and waits for the relays.
func (l *DelayLink) Close() {
	l.ln.Close()
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

func (l *DelayLink) serve() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.wg.Add(1)
		go l.relay(c)
	}
}

// relay joins c to a new connection upstream, each direction delayed.
func (l *DelayLink) relay(c net.Conn) {
	defer l.wg.Done()
	up, err := net.DialTimeout("tcp", l.upstream, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	if !l.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { l.pipe(up, c); done <- struct{}{} }()
	go func() { l.pipe(c, up); done <- struct{}{} }()
	<-done // either side ended: end both
	c.Close()
	up.Close()
	<-done
	l.mu.Lock()
	delete(l.conns, c)
	delete(l.conns, up)
	l.mu.Unlock()
}

func (l *DelayLink) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

// chunk is what one read got, and when it may be written on.
type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk written delay after it was read.
func (l *DelayLink) pipe(dst, src net.Conn) {
	queue := make(chan chunk, 1024)
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{b: buf[:n], due: time.Now().Add(l.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range queue {
		if wait := time.Until(ch.due); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := dst.Write(ch.b); err != nil {
			src.Close() // the reader ends on it
			for range queue {
			}
			return
		}
	}
}

// hopURL is raw with its host:port replaced by addr (a delay link in front
// of it); raw as it is when it has no host.
func hopURL(raw, addr string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw, fmt.Errorf("hop %q: not a URL with a host", raw)
	}
	u.Host = addr
	return u.String(), nil
}
