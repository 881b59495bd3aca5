package httpx

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// connLimit bounds a server's open client connections. Unlike
// netutil.LimitListener, a connection that sits idle between keep-alive
// requests does not keep a new client waiting: when a new connection arrives
// at the cap, the connection idle the longest is closed to make room (as the
// server's IdleTimeout would close it later). Only when every connection is
// working on a request does the new one wait for a slot.
type connLimit struct {
	net.Listener
	max int

	mu      sync.Mutex
	open    map[*limitedConn]struct{}
	freed   chan struct{} // receives when a slot is freed or a connection goes idle; buffered 1
	waiting atomic.Int32  // Accepts waiting for a slot: only then does going idle notify
	closed  chan struct{} // closed with the listener: a waiting Accept gives up
	once    sync.Once
}

// openConns counts the client connections open on the servers Serve runs
// (one per process): flashgate_http_open_connections.
var openConns atomic.Int64

// countConns makes srv count its connections in n, from accepted to closed
// (or hijacked), idle keep-alive ones included.
func countConns(srv *http.Server, n *atomic.Int64) {
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			n.Add(1)
		case http.StateClosed, http.StateHijacked:
			n.Add(-1)
		}
		if next != nil {
			next(c, st)
		}
	}
}

// limitConns wraps ln so that srv keeps at most max connections open; it
// takes srv's ConnState hook to see which connections are idle.
func limitConns(ln net.Listener, max int, srv *http.Server) net.Listener {
	l := &connLimit{Listener: ln, max: max, freed: make(chan struct{}, 1),
		open: map[*limitedConn]struct{}{}, closed: make(chan struct{})}
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if lc, ok := c.(*limitedConn); ok {
			l.track(lc, st)
		}
		if next != nil {
			next(c, st)
		}
	}
	return l
}

// Accept takes the next connection and, at the cap, makes room for it.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	// Counted as waiting before looking, so that a connection going idle
	// after the look below notifies (see track).
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	for {
		l.mu.Lock()
		if len(l.open) < l.max {
			lc := &limitedConn{Conn: c, limit: l}
			l.open[lc] = struct{}{}
			l.mu.Unlock()
			return lc, nil
		}
		victim := l.longestIdle()
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close() // frees its slot at once
			continue
		}
		select { // every connection is busy: wait for one to end or go idle
		case <-l.freed:
		case <-l.closed:
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and wakes an Accept waiting for a slot.
func (l *connLimit) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// longestIdle returns the connection idle the longest and forgets it as idle,
// or nil. l.mu is held. Only at the cap, so a scan of the open connections.
func (l *connLimit) longestIdle() *limitedConn {
	for {
		var victim *limitedConn
		var since int64
		for c := range l.open {
			if t := c.idleSince.Load(); t != 0 && (victim == nil || t < since) {
				victim, since = c, t
			}
		}
		// A victim that went back to work meanwhile is not taken.
		if victim == nil || victim.idleSince.CompareAndSwap(since, 0) {
			return victim
		}
	}
}

// track follows a connection's state on every request, so it takes no lock:
// an idle connection records since when, and wakes an Accept only when one
// waits for a slot.
func (l *connLimit) track(c *limitedConn, st http.ConnState) {
	if st != http.StateIdle {
		c.idleSince.Store(0)
		return
	}
	c.idleSince.Store(time.Now().UnixNano())
	if l.waiting.Load() > 0 {
		l.notify()
	}
}

func (l *connLimit) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.open, c)
	l.notify()
}

// notify wakes a waiting Accept, if any.
func (l *connLimit) notify() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// limitedConn gives its slot back once, on its first Close.
type limitedConn struct {
	net.Conn
	limit     *connLimit
	idleSince atomic.Int64 // unix nanoseconds since it went idle; 0: working or new
	once      sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.limit.release(c) })
	return err
}
