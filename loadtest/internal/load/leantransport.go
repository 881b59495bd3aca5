package load

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// leanTransport is an HTTP/1.1 keep-alive client transport for the load
// generator alone, for runs where the generator's own CPU decides the figure:
// overload sends three times what the stack can take, from the same two CPUs.
// Go's http.Transport hands every request to a connection's read and write
// goroutines and back (several goroutine switches and ~50 us of CPU per
// request here); leanTransport writes the request and reads the answer on the
// caller's goroutine, over a pool of idle connections, so that the time
// measured is the server's and the kernel's, not the generator's own queue.
//
// It speaks what the reserve route needs: a request with a body, answers with
// Content-Length (gin's), no chunked bodies, no TLS, no proxies. Like Go's
// transport, it resends a request with an Idempotency-Key once on a new
// connection when a kept-alive one was closed before any byte of the answer
// came back (the race of every HTTP/1.1 client with a server that closes idle
// connections), and counts that in replays.
type leanTransport struct {
	timeout time.Duration // per request: dial, write and read
	maxIdle int
	replays *atomic.Int64

	mu   sync.Mutex
	idle map[string][]*leanConn // by host:port
}

type leanConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// newLeanConn wraps c with its buffers.
func newLeanConn(c net.Conn) *leanConn {
	return &leanConn{c: c, br: bufio.NewReaderSize(c, 4<<10), bw: bufio.NewWriterSize(c, 4<<10)}
}

func newLeanTransport(timeout time.Duration, maxIdle int, replays *atomic.Int64) *leanTransport {
	return &leanTransport{timeout: timeout, maxIdle: maxIdle, replays: replays, idle: map[string][]*leanConn{}}
}

// errStale is a kept-alive connection that the server had closed: nothing of
// the answer came back, so the request may be sent again.
var errStale = errors.New("kept-alive connection closed before the answer")

func (t *leanTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := requestBody(req)
	if err != nil {
		return nil, err
	}
	host := req.URL.Host
	lc, reused := t.get(host)
	if lc == nil {
		if lc, err = t.dial(host); err != nil {
			return nil, err
		}
	}
	resp, err := t.exchange(lc, req, body, reused)
	if errors.Is(err, errStale) && req.Header.Get(idempotencyKey) != "" {
		t.replays.Add(1)
		if lc, err = t.dial(host); err != nil {
			return nil, err
		}
		resp, err = t.exchange(lc, req, body, false)
	}
	return resp, err
}

func requestBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	defer req.Body.Close()
	return io.ReadAll(req.Body)
}

func (t *leanTransport) dial(host string) (*leanConn, error) {
	c, err := net.DialTimeout("tcp", host, t.timeout)
	if err != nil {
		return nil, err
	}
	return newLeanConn(c), nil
}

// exchange writes req on lc and reads its answer; lc goes back to the pool
// unless either side asked to close it.
func (t *leanTransport) exchange(lc *leanConn, req *http.Request, body []byte, reused bool) (*http.Response, error) {
	deadline := time.Now().Add(t.timeout)
	if d, ok := req.Context().Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = lc.c.SetDeadline(deadline)
	writeRequest(lc.bw, req, body)
	if err := lc.bw.Flush(); err != nil {
		lc.c.Close()
		return nil, stale(err, reused)
	}
	if _, err := lc.br.Peek(1); err != nil {
		lc.c.Close()
		return nil, stale(err, reused)
	}
	resp, err := http.ReadResponse(lc.br, req)
	if err != nil {
		lc.c.Close()
		return nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		lc.c.Close()
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if resp.Close || req.Close {
		lc.c.Close()
	} else {
		t.put(req.URL.Host, lc)
	}
	return resp, nil
}

// stale marks a failure before any byte of the answer on a kept-alive
// connection as errStale; on a new connection it is the failure itself.
func stale(err error, reused bool) error {
	var ne net.Error
	if reused && !(errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%w: %w", errStale, err)
	}
	return err
}

// writeRequest writes req as HTTP/1.1 with body; the body always has a
// Content-Length, so the server may keep the connection.
func writeRequest(w *bufio.Writer, req *http.Request, body []byte) {
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(req.URL.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(req.URL.Host)
	w.WriteString("\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(body)))
	w.WriteString("\r\n")
	for k, vs := range req.Header {
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	w.WriteString("\r\n")
	w.Write(body)
}

func (t *leanTransport) get(host string) (*leanConn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	conns := t.idle[host]
	if len(conns) == 0 {
		return nil, false
	}
	lc := conns[len(conns)-1]
	t.idle[host] = conns[:len(conns)-1]
	return lc, true
}

func (t *leanTransport) put(host string, lc *leanConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[host]) >= t.maxIdle {
		lc.c.Close()
		return
	}
	t.idle[host] = append(t.idle[host], lc)
}

// CloseIdleConnections closes every pooled connection.
func (t *leanTransport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for host, conns := range t.idle {
		for _, lc := range conns {
			lc.c.Close()
		}
		delete(t.idle, host)
	}
}
