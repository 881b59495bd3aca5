//go:build linux

package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// loopSupported: this system has epoll, so the lean sender can be one event loop.
const loopSupported = true

// sendLoop is the lean sender as wrk and wrk2 are built: one goroutine that
// owns every connection (non-blocking sockets in an epoll set of its own, not
// the Go runtime's) and, at each wake-up, writes the requests now due on idle
// connections and reads the answers that came in. A request and its answer
// cost a write, a read and a share of one epoll_wait: no goroutine per request
// in flight, no wake-up of one through the runtime's poller (with a goroutine
// per connection, a third of the generator's CPU was the Go scheduler's, and
// half the syscalls its poller's). It keeps sendWorkers' open model and
// answers: requests leave at their planned time; a request due when every
// connection is busy opens a new one, up to MaxWorkers, after which the rate
// falls behind; a kept-alive connection closed before any byte of its answer
// is dialled again and the request sent once more (counted in replays).
// One loop takes at most one CPU; o.Loops of them (wrk's threads) share the
// requests and the connections between them.
func sendLoop(ctx context.Context, target string, bodies [][]byte, plan Plan, rate float64, o AttackOptions) (Volley, error) {
	r, err := newLeanRun(target, plan, rate, o)
	if err != nil {
		return Volley{}, err
	}
	addr, err := net.ResolveTCPAddr("tcp", r.host)
	if err != nil {
		return Volley{}, fmt.Errorf("send to %s: %w", target, err)
	}
	proto := eventLoop{host: r.host, head: r.head, bodies: bodies, plan: plan, timeout: o.Timeout}
	if _, _, err = sockaddrOf(addr.IP, addr.Port); err != nil {
		return Volley{}, fmt.Errorf("send to %s: %w", target, err)
	}
	var localIP net.IP
	if o.LocalIP != "" {
		if localIP = net.ParseIP(o.LocalIP); localIP == nil {
			return Volley{}, fmt.Errorf("send from %q: not an IP address", o.LocalIP)
		}
		if _, _, err = sockaddrOf(localIP, 0); err != nil {
			return Volley{}, fmt.Errorf("send from %s: %w", o.LocalIP, err)
		}
	}
	n, at := r.n, r.at

	// Each loop sends every loops-th request, from its own connections: its
	// share of the up-front ones and of MaxWorkers.
	loops := max(o.Loops, 1)
	ls := make([]*eventLoop, loops)
	for k := range ls {
		l := proto
		l.next, l.step = k, loops
		// Each loop its own socket addresses: Connect and Bind write into them.
		l.family, l.sa, _ = sockaddrOf(addr.IP, addr.Port)
		if localIP != nil {
			_, l.local, _ = sockaddrOf(localIP, 0)
		}
		l.shots = make([]Shot, 0, n/loops+1)
		if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			for _, l := range ls[:k] {
				l.closeAll()
			}
			return Volley{}, fmt.Errorf("send to %s: epoll: %w", target, err)
		}
		ls[k] = &l
	}
	// The connections started up front are open before the clock starts, as
	// sendWorkers' are (see there why).
	up := min(o.UpFront(rate), n)
	var wg sync.WaitGroup
	for k, l := range ls {
		wg.Go(func() { l.openUpFront(share(up, k, loops), o.Timeout) })
	}
	wg.Wait()
	start := time.Now()
	most := max(o.MaxWorkers, loops)
	for k, l := range ls {
		wg.Go(func() {
			defer l.closeAll()
			l.run(ctx, start, n, at, share(most, k, loops))
		})
	}
	wg.Wait()
	v := Volley{Rate: rate, Shots: make([]Shot, 0, n)}
	for _, l := range ls {
		v.Shots = append(v.Shots, l.shots...)
		v.Replays += l.replays
	}
	finish(&v, target, o)
	return v, nil
}

// share is part k of total split into parts as evenly as whole numbers go.
func share(total, k, parts int) int {
	n := total / parts
	if k < total%parts {
		n++
	}
	return n
}

// openUpFront dials up connections and waits, at most timeout, until each is
// open or failed.
func (l *eventLoop) openUpFront(up int, timeout time.Duration) {
	for l.open < up {
		if _, err := l.dial(); err != nil {
			break
		}
	}
	for give := time.Now().Add(timeout); l.connecting > 0 && time.Now().Before(give); {
		l.wait(50)
	}
}

// run sends l's requests (l.next, then every l.step-th up to n), request i at
// start plus at(i), on at most most connections, and reads every answer.
func (l *eventLoop) run(ctx context.Context, start time.Time, n int, at func(int) time.Duration, most int) {
	lastScan := start
	for {
		now := time.Now()
		stopped := ctx.Err() != nil
		// Requests due within a millisecond leave together, as sendWorkers'
		// do (and wrk2's): one wake-up per millisecond at most, not per request.
		for !stopped && l.next < n && at(l.next) <= now.Sub(start)+time.Millisecond {
			c := l.popIdle()
			if c == nil {
				if l.open >= most {
					break // every connection busy: the rate falls behind, as sendWorkers' does
				}
				var err error
				if c, err = l.dial(); err != nil {
					l.shots = append(l.shots, Shot{Seq: uint64(l.next), Req: -1, At: now, Err: l.dialError(err).Error()})
					l.next += l.step
					continue
				}
			}
			l.inflight++
			l.assign(c, leanJob{i: l.next, at: now}, false)
			l.next += l.step
		}
		if l.inflight == 0 && l.connecting == 0 && (stopped || l.next >= n) {
			return
		}
		wait := 50 // ms: the longest sleep, so that timeouts and ctx are seen
		if !stopped && l.next < n && (len(l.idle) > 0 || l.open < most) {
			due := at(l.next) - time.Since(start) - time.Millisecond
			wait = min(wait, max(int((due+time.Millisecond-1)/time.Millisecond), 0))
		}
		l.wait(wait)
		if now := time.Now(); now.Sub(lastScan) >= 50*time.Millisecond {
			lastScan = now
			l.expire(now)
		}
	}
}

// sockaddrOf is ip:port as a socket address, with its family.
func sockaddrOf(ip net.IP, port int) (int, unix.Sockaddr, error) {
	if ip4 := ip.To4(); ip4 != nil {
		sa := &unix.SockaddrInet4{Port: port}
		copy(sa.Addr[:], ip4)
		return unix.AF_INET, sa, nil
	}
	if ip16 := ip.To16(); ip16 != nil {
		sa := &unix.SockaddrInet6{Port: port}
		copy(sa.Addr[:], ip16)
		return unix.AF_INET6, sa, nil
	}
	return 0, nil, fmt.Errorf("address %v is neither IPv4 nor IPv6", ip)
}

// eventLoop is one sendLoop's state; only its goroutine touches it.
type eventLoop struct {
	ep        int           // the epoll set
	family    int           // of sa
	sa, local unix.Sockaddr // the server, and where requests leave from (nil: the system's choice)
	host      string
	head      []byte // the request up to its Content-Length's value
	bodies    [][]byte
	plan      Plan
	timeout   time.Duration

	conns      []*loopConn // by id, the epoll event's data; nil once closed (ids are never reused)
	live       []*loopConn // open or opening, compacted by expire
	idle       []*loopConn // open, no request; may hold some closed since
	events     [256]unix.EpollEvent
	open       int // connections open or opening
	connecting int
	inflight   int // requests sent and not yet answered
	next, step int // the next request of the plan to send, and the one after it is next+step

	shots   []Shot
	replays int64
}

// loopConn is one connection and the request it carries.
type loopConn struct {
	id, fd     int
	connecting bool
	closed     bool
	busy       bool
	reused     bool // it carried an answer, or waited idle, before the request now on it
	replayed   bool // the request on it was sent once already, on a connection since closed
	watchOut   bool // EPOLLOUT is in its interest set
	job        leanJob
	deadline   time.Time
	out        []byte // the request
	sent       int    // bytes of out written
	in         []byte // the answer so far
}

// dial opens a non-blocking connection to the server and adds it to the set.
func (l *eventLoop) dial() (*loopConn, error) {
	fd, err := unix.Socket(l.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if l.local != nil {
		if err := unix.Bind(fd, l.local); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	if err := unix.Connect(fd, l.sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(fd)
		return nil, err
	}
	c := &loopConn{id: len(l.conns), fd: fd, connecting: true, watchOut: true, in: make([]byte, 0, 1024)}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP, Fd: int32(c.id)}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return nil, err
	}
	l.conns = append(l.conns, c)
	l.live = append(l.live, c)
	l.open++
	l.connecting++
	return c, nil
}

func (l *eventLoop) dialError(err error) error {
	return fmt.Errorf("dial tcp %s: %w", l.host, err)
}

// wait sleeps in epoll_wait for at most ms milliseconds and handles every event.
func (l *eventLoop) wait(ms int) {
	k, err := unix.EpollWait(l.ep, l.events[:], ms)
	if err != nil {
		return // EINTR: the caller loops
	}
	for _, ev := range l.events[:k] {
		if c := l.conns[ev.Fd]; c != nil {
			l.event(c, ev.Events)
		}
	}
}

// event handles what epoll reported on c.
func (l *eventLoop) event(c *loopConn, ev uint32) {
	if c.connecting {
		if ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) == 0 {
			return
		}
		soErr, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err == nil && soErr != 0 {
			err = unix.Errno(soErr)
		}
		c.connecting = false
		l.connecting--
		if err != nil {
			if c.busy {
				l.fail(c, l.dialError(err))
			} else {
				l.close(c)
			}
			return
		}
		if !c.busy { // opened up front: it waits idle, where the server may close it as idle
			c.reused = true
			l.interest(c, false)
			l.idle = append(l.idle, c)
			return
		}
		l.write(c)
		return
	}
	if c.busy && c.sent < len(c.out) && ev&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		l.write(c)
		return
	}
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
		l.read(c)
	}
}

// interest sets c's epoll interest: reads, and writes when out.
func (l *eventLoop) interest(c *loopConn, out bool) {
	if c.watchOut == out {
		return
	}
	c.watchOut = out
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(c.id)}
	if out {
		ev.Events |= unix.EPOLLOUT
	}
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &ev)
}

// popIdle is an open connection with no request on it, or nil.
func (l *eventLoop) popIdle() *loopConn {
	for len(l.idle) > 0 {
		c := l.idle[len(l.idle)-1]
		l.idle = l.idle[:len(l.idle)-1]
		if !c.closed {
			return c
		}
	}
	return nil
}

// assign puts request j on c and writes it once c is open.
func (l *eventLoop) assign(c *loopConn, j leanJob, replayed bool) {
	body := l.bodies[l.plan.Requests[j.i]]
	c.busy, c.job, c.replayed = true, j, replayed
	c.deadline = time.Now().Add(l.timeout)
	c.out = append(c.out[:0], l.head...)
	c.out = strconv.AppendInt(c.out, int64(len(body)), 10)
	c.out = append(append(c.out, "\r\n\r\n"...), body...)
	c.sent, c.in = 0, c.in[:0]
	if !c.connecting {
		l.write(c)
	}
}

// write writes what is left of c's request.
func (l *eventLoop) write(c *loopConn) {
	k, err := unix.Write(c.fd, c.out[c.sent:])
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		l.interest(c, true)
		return
	}
	if err != nil {
		l.broken(c, fmt.Errorf("write tcp %s: %w", l.host, err))
		return
	}
	c.sent += k
	l.interest(c, c.sent < len(c.out))
}

// read reads what came in on c and, once its answer is whole, records it.
func (l *eventLoop) read(c *loopConn) {
	if len(c.in) == cap(c.in) {
		c.in = append(c.in, make([]byte, cap(c.in))...)[:len(c.in)]
	}
	k, err := unix.Read(c.fd, c.in[len(c.in):cap(c.in)])
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return
	}
	if k <= 0 || !c.busy { // the server closed or reset it, or sent what nobody asked
		if !c.busy {
			l.close(c)
			return
		}
		if err == nil {
			err = io.EOF
		}
		l.broken(c, fmt.Errorf("read tcp %s: %w", l.host, err))
		return
	}
	c.in = c.in[:len(c.in)+k]
	end := bytes.Index(c.in, []byte("\r\n\r\n"))
	if end < 0 {
		if len(c.in) > 64<<10 {
			l.fail(c, errors.New("an answer's head over 64 KiB"))
		}
		return
	}
	status, length, keep, err := parseHead(c.in[:end+4])
	if err != nil {
		l.fail(c, err)
		return
	}
	whole := end + 4 + length
	if len(c.in) < whole {
		if cap(c.in) < whole {
			c.in = append(make([]byte, 0, whole), c.in...)
		}
		return
	}
	now := time.Now()
	body := c.in[end+4 : whole]
	sh := Shot{Seq: uint64(c.job.i), Req: int32(c.job.i), At: c.job.at, Latency: now.Sub(c.job.at)}
	sh.setAnswer(status, body)
	l.shots = append(l.shots, sh)
	l.inflight--
	c.busy, c.reused = false, true
	if !keep || len(c.in) > whole {
		l.close(c)
		return
	}
	c.in = c.in[:0]
	l.idle = append(l.idle, c)
}

// broken handles a connection that failed while carrying a request: a
// kept-alive one that failed before any byte of the answer is the server's
// close of an idle connection racing the request, which is sent once more on
// a new connection; anything else is the request's failure.
func (l *eventLoop) broken(c *loopConn, err error) {
	if !c.reused || len(c.in) > 0 || c.replayed {
		l.fail(c, err)
		return
	}
	j := c.job
	l.close(c)
	l.replays++
	nc, derr := l.dial()
	if derr != nil {
		l.record(j, l.dialError(derr))
		return
	}
	l.assign(nc, j, true)
}

// fail records c's request as failed with err and closes c.
func (l *eventLoop) fail(c *loopConn, err error) {
	j := c.job
	l.close(c)
	l.record(j, err)
}

func (l *eventLoop) record(j leanJob, err error) {
	l.shots = append(l.shots, Shot{Seq: uint64(j.i), Req: -1, At: j.at, Latency: time.Since(j.at), Err: err.Error()})
	l.inflight--
}

// close closes c; any request on it is the caller's to record or resend.
func (l *eventLoop) close(c *loopConn) {
	if c.closed {
		return
	}
	if c.connecting {
		l.connecting--
	}
	c.closed, c.busy, c.connecting = true, false, false
	unix.Close(c.fd) // leaves the epoll set with it
	l.conns[c.id] = nil
	l.open--
}

// expire fails every request whose connection has outlived its timeout, and
// drops closed connections from live.
func (l *eventLoop) expire(now time.Time) {
	kept := l.live[:0]
	for _, c := range l.live {
		if c.busy && now.After(c.deadline) {
			l.fail(c, fmt.Errorf("read tcp %s: i/o timeout (%v)", l.host, l.timeout))
		}
		if !c.closed {
			kept = append(kept, c)
		}
	}
	clear(l.live[len(kept):])
	l.live = kept
}

// closeAll closes every connection and the epoll set.
func (l *eventLoop) closeAll() {
	for _, c := range l.live {
		if !c.closed {
			l.close(c)
		}
	}
	unix.Close(l.ep)
}
