package httpx

import (
	"net"
	"net/http"
	"sync"
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

	mu     sync.Mutex
	open   int
	freed  chan struct{}              // receives when a slot is freed or a connection goes idle; buffered 1
	idle   map[*limitedConn]time.Time // idle since
	closed chan struct{}              // closed with the listener: a waiting Accept gives up
	once   sync.Once
}

// limitConns wraps ln so that srv keeps at most max connections open; it
// takes srv's ConnState hook to see which connections are idle.
func limitConns(ln net.Listener, max int, srv *http.Server) net.Listener {
	l := &connLimit{Listener: ln, max: max, freed: make(chan struct{}, 1),
		idle: map[*limitedConn]time.Time{}, closed: make(chan struct{})}
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
	for {
		l.mu.Lock()
		if l.open < l.max {
			l.open++
			l.mu.Unlock()
			return &limitedConn{Conn: c, limit: l}, nil
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
// or nil. l.mu is held.
func (l *connLimit) longestIdle() *limitedConn {
	var victim *limitedConn
	var since time.Time
	for c, t := range l.idle {
		if victim == nil || t.Before(since) {
			victim, since = c, t
		}
	}
	delete(l.idle, victim)
	return victim
}

func (l *connLimit) track(c *limitedConn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateIdle:
		l.idle[c] = time.Now()
		l.notify()
	default:
		delete(l.idle, c)
	}
}

func (l *connLimit) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.idle, c)
	l.open--
	l.notify()
}

// notify wakes a waiting Accept, if any. l.mu is held.
func (l *connLimit) notify() {
	select {
	case l.freed <- struct{}{}:
	default:
	}
}

// limitedConn gives its slot back once, on its first Close.
type limitedConn struct {
	net.Conn
	limit *connLimit
	once  sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.limit.release(c) })
	return err
}
