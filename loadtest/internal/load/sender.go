package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// sendLean is Fire without vegeta: the same open model (each request leaves at
// its planned time whether or not the earlier ones were answered, up to
// MaxWorkers in flight), on kept-alive HTTP/1.1 connections, writing each
// request from its prebuilt body and reading each answer with a parser that
// reads only what a Shot keeps. vegeta's per-request work (an http.Request, a
// Result, the Go transport's goroutines) is most of a generator's CPU; on a
// machine whose CPUs the stack shares, that CPU is the stack's. It sends from
// one event loop (sendLoop) where the system has epoll, unless o.Sender asks
// for a goroutine per request in flight (sendWorkers).
func sendLean(ctx context.Context, target string, bodies [][]byte, plan Plan, rate float64, o AttackOptions) (Volley, error) {
	if loopSupported && o.Sender != SenderWorkers {
		return sendLoop(ctx, target, bodies, plan, rate, o)
	}
	return sendWorkers(ctx, target, bodies, plan, rate, o)
}

// sendWorkers is sendLean with a worker goroutine per request in flight, up
// to MaxWorkers, each on a connection of its own.
func sendWorkers(ctx context.Context, target string, bodies [][]byte, plan Plan, rate float64, o AttackOptions) (Volley, error) {
	r, err := newLeanRun(target, plan, rate, o)
	if err != nil {
		return Volley{}, err
	}
	s := &leanSender{host: r.host, head: r.head, bodies: bodies, plan: plan, timeout: o.Timeout,
		jobs: make(chan leanJob), dialer: net.Dialer{Timeout: o.Timeout, LocalAddr: LocalTCPAddr(o.LocalIP)}}
	n, at := r.n, r.at
	var wg sync.WaitGroup
	workers, most := 0, max(o.MaxWorkers, 1)
	// The workers started up front open their connections before the clock
	// starts: opened during the burst, hundreds of dials in its first 100 ms
	// took the generator and the proxy a CPU between them (the demo at 5,000/s:
	// 796-1,388 x 503 without, 0-901 with 512 open, in alternated runs).
	var dialled sync.WaitGroup
	for up := min(o.UpFront(rate), n); workers < up; workers++ {
		wg.Add(1)
		dialled.Add(1)
		go s.work(&wg, &dialled, nil)
	}
	dialled.Wait()
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		// Requests due within a millisecond leave together: one timer and one
		// wake-up per millisecond, not per request (wrk2's pacing is as coarse).
		if wait := time.Until(start.Add(at(i))); wait > time.Millisecond {
			Sleep(ctx, wait)
		}
		j := leanJob{i: i, at: time.Now()} // stamped here: in sending order, as the plot wants
		select {
		case s.jobs <- j:
			continue
		default:
		}
		if workers < most {
			workers++
			wg.Add(1)
			go s.work(&wg, nil, &j)
			continue
		}
		select { // every worker busy: the rate falls behind, as vegeta's does
		case s.jobs <- j:
		case <-ctx.Done():
		}
	}
	close(s.jobs)
	wg.Wait()
	v := Volley{Rate: rate, Replays: s.replays.Load()}
	for _, w := range s.done {
		v.Shots = append(v.Shots, w...)
	}
	finish(&v, target, o)
	return v, nil
}

// finish puts v's shots in the order their answers arrived and hands them to
// o.Results.
func finish(v *Volley, target string, o AttackOptions) {
	slices.SortFunc(v.Shots, func(a, b Shot) int { return a.At.Add(a.Latency).Compare(b.At.Add(b.Latency)) })
	if o.Results != nil {
		for _, sh := range v.Shots {
			if v.ResultsErr = o.Results(resultOf(sh, target)); v.ResultsErr != nil {
				break
			}
		}
	}
}

// leanSender is one sendWorkers' shared state.
type leanSender struct {
	host    string
	head    []byte // the request up to its Content-Length's value
	bodies  [][]byte
	plan    Plan
	timeout time.Duration
	dialer  net.Dialer // o.Timeout, from o.LocalIP when set
	jobs    chan leanJob
	replays atomic.Int64

	mu   sync.Mutex
	done [][]Shot // each worker's shots, added as it ends
}

// leanJob is a request to send: its index in the plan's requests, and when
// it left the dispatcher.
type leanJob struct {
	i  int
	at time.Time
}

// work sends request first (when not nil), then each one the dispatcher
// hands it, on one kept-alive connection of its own. A worker started up
// front (dialled not nil) opens its connection first and says so on dialled;
// one that could not sends its first request on a connection dialled then.
func (s *leanSender) work(wg *sync.WaitGroup, dialled *sync.WaitGroup, first *leanJob) {
	defer wg.Done()
	var lc *leanConn
	if dialled != nil {
		if c, err := s.dialer.Dial("tcp", s.host); err == nil {
			lc = newLeanConn(c)
		}
		dialled.Done()
	}
	var shots []Shot
	defer func() {
		if lc != nil {
			lc.c.Close()
		}
		s.mu.Lock()
		s.done = append(s.done, shots)
		s.mu.Unlock()
	}()
	if first != nil {
		var sh Shot
		sh, lc = s.send(lc, *first)
		shots = append(shots, sh)
	}
	for j := range s.jobs {
		var sh Shot
		sh, lc = s.send(lc, j)
		shots = append(shots, sh)
	}
}

// send writes request j on lc (dialled when nil) and reads its answer; a
// kept-alive connection the server had closed is dialled again and the request
// sent once more (reserves are idempotent by orderId). It returns the
// connection to go on with, nil when it was closed.
func (s *leanSender) send(lc *leanConn, j leanJob) (Shot, *leanConn) {
	req := s.plan.Requests[j.i]
	sh := Shot{Seq: uint64(j.i), Req: int32(j.i), At: j.at}
	body := s.bodies[req]
	for attempt := 0; ; attempt++ {
		reused := lc != nil
		if lc == nil {
			c, err := s.dialer.Dial("tcp", s.host)
			if err != nil {
				sh.Req, sh.Err, sh.Latency = -1, err.Error(), time.Since(sh.At)
				return sh, nil
			}
			lc = newLeanConn(c)
		}
		keep, err := s.exchange(lc, body, reused, &sh)
		if err == nil {
			sh.Latency = time.Since(sh.At)
			if !keep {
				lc.c.Close()
				lc = nil
			}
			return sh, lc
		}
		lc.c.Close()
		lc = nil
		if attempt == 0 && errors.Is(err, errStale) {
			s.replays.Add(1)
			continue
		}
		sh.Req, sh.Status, sh.Err, sh.Latency = -1, 0, err.Error(), time.Since(sh.At)
		return sh, nil
	}
}

// exchange writes one request with body on lc and reads its answer into sh;
// keep is false when either side asked to close the connection. A failure
// before any byte of the answer on a kept-alive connection is errStale.
func (s *leanSender) exchange(lc *leanConn, body []byte, reused bool, sh *Shot) (keep bool, err error) {
	_ = lc.c.SetDeadline(time.Now().Add(s.timeout))
	lc.bw.Write(s.head)
	lc.bw.WriteString(strconv.Itoa(len(body)))
	lc.bw.WriteString("\r\n\r\n")
	lc.bw.Write(body)
	if err := lc.bw.Flush(); err != nil {
		return false, stale(err, reused)
	}
	if _, err := lc.br.Peek(1); err != nil {
		return false, stale(err, reused)
	}
	status, length, keep, err := readHead(lc.br)
	if err != nil {
		return false, err
	}
	b := make([]byte, length)
	if _, err := io.ReadFull(lc.br, b); err != nil {
		return false, err
	}
	sh.setAnswer(status, b)
	return keep, nil
}

// readHead reads an answer's status line and headers (answerHead).
func readHead(br *bufio.Reader) (status, length int, keep bool, err error) {
	var h answerHead
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, err
		}
		if done, err := h.line(line); err != nil {
			return 0, 0, false, err
		} else if done {
			return h.status, h.length, h.keep, nil
		}
	}
}

// parseHead parses an answer's head that is whole in head, its blank line
// included (answerHead).
func parseHead(head []byte) (status, length int, keep bool, err error) {
	var h answerHead
	for len(head) > 0 {
		var line []byte
		line, head, _ = bytes.Cut(head, []byte("\n"))
		if done, err := h.line(line); err != nil {
			return 0, 0, false, err
		} else if done {
			return h.status, h.length, h.keep, nil
		}
	}
	return 0, 0, false, errors.New("an answer's head without the blank line that ends it")
}

// answerHead is an answer's status line and headers, taken a line at a time:
// its status, its body's length (the server always sends Content-Length for
// these small bodies) and whether the connection stays open.
type answerHead struct {
	status, length int
	keep           bool
	started        bool // the status line was taken
}

// line takes the head's next line; done is true at the blank line that ends
// the head.
func (h *answerHead) line(line []byte) (done bool, err error) {
	if !h.started {
		h.started, h.keep, h.length = true, true, -1
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
			return false, fmt.Errorf("malformed status line %q", line)
		}
		if h.status, err = strconv.Atoi(string(line[9:12])); err != nil {
			return false, fmt.Errorf("malformed status line %q", line)
		}
		return false, nil
	}
	hd := bytes.TrimRight(line, "\r\n")
	if len(hd) == 0 {
		if h.length < 0 {
			return true, errors.New("an answer without Content-Length")
		}
		return true, nil
	}
	name, value, _ := bytes.Cut(hd, []byte(":"))
	value = bytes.TrimSpace(value)
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		if h.length, err = strconv.Atoi(string(value)); err != nil || h.length < 0 {
			return false, fmt.Errorf("malformed Content-Length %q", value)
		}
	case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
		h.keep = false
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		return false, fmt.Errorf("unexpected Transfer-Encoding %q", value)
	}
	return false, nil
}

// setAnswer puts an answer's status on sh, with what its body says that a
// Shot keeps: the orderId of a 201, the error code of a refusal.
func (sh *Shot) setAnswer(status int, body []byte) {
	sh.Status = uint16(status)
	if status == 201 {
		sh.OrderID = jsonString(body, "orderId")
	} else if status >= 300 {
		sh.Code = jsonString(body, "error")
	}
}

// leanRun is what both lean senders take from their arguments: the
// server's host:port, each request's text up to its Content-Length's value,
// how many of the plan's requests leave, and when each is due from the start.
type leanRun struct {
	host string
	head []byte
	n    int
	at   func(int) time.Duration
}

func newLeanRun(target string, plan Plan, rate float64, o AttackOptions) (leanRun, error) {
	u, err := url.Parse(target)
	if err != nil {
		return leanRun{}, fmt.Errorf("send to %s: %w", target, err)
	}
	r := leanRun{host: u.Host, n: len(plan.Requests),
		head: []byte("POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host +
			"\r\nContent-Type: application/json\r\nContent-Length: "),
		at: func(i int) time.Duration { return time.Duration(float64(i) / max(rate, 1) * float64(time.Second)) }}
	if o.Schedule != nil {
		r.n = min(r.n, len(o.Schedule))
		r.at = func(i int) time.Duration { return o.Schedule[i] }
	}
	return r, nil
}

// resultOf is a shot in vegeta's result form, for AttackOptions.Results.
func resultOf(sh Shot, target string) *vegeta.Result {
	return &vegeta.Result{Attack: "burst", Seq: sh.Seq, Code: sh.Status, Timestamp: sh.At, Latency: sh.Latency,
		Error: sh.Err, Method: "POST", URL: target}
}
