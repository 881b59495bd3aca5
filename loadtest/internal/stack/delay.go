package stack

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"time"
)

// StartDelayLink is a Relay to upstream (host:port) that holds every chunk it
// relays for delay in each direction, in order: a network hop with latency,
// on loopback. toxiproxy's latency toxic takes whole milliseconds; a
// datacentre hop is a fraction of one, and that fraction is what the stack's
// figures are to be read against.
func StartDelayLink(upstream string, delay time.Duration) (*Relay, error) {
	dial := func() net.Conn {
		up, err := net.DialTimeout("tcp", upstream, 5*time.Second)
		if err != nil {
			return nil
		}
		return up
	}
	return StartRelay("delay link to "+upstream, dial, func(dst, src net.Conn) { delayedCopy(dst, src, delay) })
}

// chunk is what one read got, and when it may be written on.
type chunk struct {
	b   []byte
	due time.Time
}

// delayedCopy copies src to dst, each chunk written delay after it was read.
// A chunk holds a copy of what was read, not the read's 32 KiB buffer: the
// hops carry thousands of small messages a second, and a buffer each was
// the harness's largest allocation in --latency runs, on the CPUs the stack
// shares.
func delayedCopy(dst, src net.Conn, delay time.Duration) {
	queue := make(chan chunk, 1024)
	go func() {
		defer close(queue)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{b: bytes.Clone(buf[:n]), due: time.Now().Add(delay)}
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
