package load

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The lean sender sends every planned request once, at its rate, and reads
// each answer into its Shot: status, the error code of a refusal, the orderId
// of a 201, tied to its request. A server that closes every third connection
// after its answer, and one that asks to close, costs no request. Both
// shapes of the sender (one event loop, a goroutine per request) do.
func TestSendLean(t *testing.T) {
	forEachSender(t, testSendLean)
}

// forEachSender runs test with each shape of the lean sender: one event
// loop, three, and a goroutine per request; as gives an AttackOptions that
// shape.
func forEachSender(t *testing.T, test func(t *testing.T, as func(AttackOptions) AttackOptions)) {
	for _, shape := range []struct {
		name   string
		sender string
		loops  int
	}{{"loop", SenderLoop, 1}, {"3loops", SenderLoop, 3}, {"workers", SenderWorkers, 0}} {
		t.Run(shape.name, func(t *testing.T) {
			test(t, func(o AttackOptions) AttackOptions {
				o.Sender, o.Loops = shape.sender, shape.loops
				return o
			})
		})
	}
}

func testSendLean(t *testing.T, as func(AttackOptions) AttackOptions) {
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Customer int64  `json:"customerId"`
			OrderID  string `json:"orderId"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		n := served.Add(1)
		if n%3 == 0 {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "application/json")
		if body.Customer%2 == 0 {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"orderId":"` + body.OrderID + `","discountAmount":1}`))
			return
		}
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"OUT_OF_STOCK","message":"none left"}`))
	}))
	defer srv.Close()

	plan := NewPlan("LEAN", Crowd{Requests: 300, Customers: 100, Retry: 0.1, Seed: 3})
	bodies := leanBodies(plan)
	start := time.Now()
	v, err := sendLean(context.Background(), srv.URL+"/vouchers/LEAN/reservations", bodies, plan, 1000,
		as(AttackOptions{MaxWorkers: 64, Timeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("300 requests at 1000/s took %v, want about 300ms", took)
	}
	if len(v.Shots) != 300 || served.Load() != 300 {
		t.Fatalf("sendLean sent %d shots, server served %d; want 300 and 300", len(v.Shots), served.Load())
	}
	seen := map[int32]bool{}
	for _, sh := range v.Shots {
		o := plan.Orders[plan.Requests[sh.Req]]
		seen[sh.Req] = true
		switch {
		case sh.Err != "":
			t.Errorf("request %d: %s", sh.Req, sh.Err)
		case o.Customer%2 == 0 && (sh.Status != 201 || sh.OrderID != o.ID):
			t.Errorf("request %d = %d %q, want 201 %q", sh.Req, sh.Status, sh.OrderID, o.ID)
		case o.Customer%2 == 1 && (sh.Status != 409 || sh.Code != "OUT_OF_STOCK"):
			t.Errorf("request %d = %d %q, want 409 OUT_OF_STOCK", sh.Req, sh.Status, sh.Code)
		}
	}
	if len(seen) != 300 {
		t.Errorf("%d distinct requests answered, want 300", len(seen))
	}
}

// With LocalIP set, every request leaves from that address: the server sees
// it as the peer, as the edge's per-client limits do.
func TestSendLeanLocalIP(t *testing.T) {
	forEachSender(t, testSendLeanLocalIP)
}

func testSendLeanLocalIP(t *testing.T, as func(AttackOptions) AttackOptions) {
	var mu sync.Mutex
	peers := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		peers[host]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"OUT_OF_STOCK"}`))
	}))
	defer srv.Close()
	plan := NewPlan("LOCAL", Crowd{Requests: 40, Customers: 40, Seed: 1})
	bodies := leanBodies(plan)
	v, err := sendLean(context.Background(), srv.URL+"/vouchers/LOCAL/reservations", bodies, plan, 2000,
		as(AttackOptions{MaxWorkers: 8, Timeout: 5 * time.Second, LocalIP: "127.0.0.2"}))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock() // the event loop's sockets are not Go's: nothing tells the race detector the handler is done
	defer mu.Unlock()
	if len(v.Shots) != 40 || peers["127.0.0.2"] != 40 || len(peers) != 1 {
		t.Errorf("sendLean from 127.0.0.2: %d shots, peers %v; want 40 shots, all from 127.0.0.2", len(v.Shots), peers)
	}
}

// The workers started up front open their connections before the first
// request leaves (as wrk2 does). Against a server that answers at once, a
// sender that dialled only when every worker was busy would need one or two
// connections for 200 requests at 2,000/s; it opens all 20. (What the server
// had accepted when the first request arrived is no measure: its accept loop
// may run after connections the client has finished dialling.)
func TestSendLeanOpensUpFrontConnections(t *testing.T) {
	forEachSender(t, testSendLeanOpensUpFrontConnections)
}

func testSendLeanOpensUpFrontConnections(t *testing.T, as func(AttackOptions) AttackOptions) {
	var accepted atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"OUT_OF_STOCK"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	plan := NewPlan("UPFRONT", Crowd{Requests: 200, Customers: 200, Seed: 1})
	sendAnswered(t, srv.URL+"/vouchers/UPFRONT/reservations", plan, 2000,
		as(AttackOptions{Workers: 20, MaxWorkers: 64, Timeout: 5 * time.Second}))
	// Every connection was dialled before sendLean returned; the server's
	// accept loop may count the last of them a moment later.
	require.Eventually(t, func() bool { return accepted.Load() >= 20 }, 5*time.Second, 10*time.Millisecond,
		"connections accepted: %d, want the 20 workers' started up front", accepted.Load())
}

// UpFront: --workers when set, else the requests the rate sends in the
// latency SLO (100 ms), at least 64; never above --max-workers.
func TestUpFront(t *testing.T) {
	for _, c := range []struct {
		o    AttackOptions
		rate float64
		want int
	}{
		{AttackOptions{MaxWorkers: 4096}, 5000, 500},
		{AttackOptions{MaxWorkers: 4096}, 100, 64},
		{AttackOptions{MaxWorkers: 256}, 50_000, 256},
		{AttackOptions{Workers: 32, MaxWorkers: 4096}, 5000, 32},
		{AttackOptions{Workers: 300, MaxWorkers: 8}, 5000, 8},
		{DefaultAttack, 5000, 500},
	} {
		if got := c.o.UpFront(c.rate); got != c.want {
			t.Errorf("%+v.UpFront(%v) = %d, want %d", c.o, c.rate, got, c.want)
		}
	}
}

// rawServer serves on a loopback listener with answer, called for each
// request a connection reads (conn counts connections from 0 in the order
// they were accepted, k the requests from 0 on that connection); it
// returns what to write back, or close to close the connection without an
// answer, or hold to never answer. It returns the address and the count of
// connections accepted.
func rawServer(t *testing.T, answer func(conn, k int) (reply string, close, hold bool)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var accepted atomic.Int64
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conn := int(accepted.Add(1) - 1)
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for k := 0; ; k++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					reply, closeIt, hold := answer(conn, k)
					switch {
					case hold:
						_, _ = io.Copy(io.Discard, c) // until the client gives up
						return
					case closeIt:
						return
					}
					if _, err := io.WriteString(c, reply); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), &accepted
}

func leanBodies(plan Plan) [][]byte {
	bodies := make([][]byte, len(plan.Orders))
	for i, o := range plan.Orders {
		bodies[i] = reserveBody(o, 5000)
	}
	return bodies
}

// sendAnswered sends plan's requests to target through sendLean and requires
// a Shot for each, every one answered (no transport error).
func sendAnswered(t *testing.T, target string, plan Plan, rate float64, o AttackOptions) Volley {
	t.Helper()
	v, err := sendLean(context.Background(), target, leanBodies(plan), plan, rate, o)
	require.NoError(t, err)
	require.Len(t, v.Shots, len(plan.Requests))
	for _, sh := range v.Shots {
		require.Empty(t, sh.Err)
	}
	return v
}

const conflict = "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 24\r\n\r\n{\"error\":\"OUT_OF_STOCK\"}"

// A server that closes each kept-alive connection when its second request
// arrives, without a byte of answer (an idle close racing the request), costs
// no request: each is sent once more on a new connection and counted as a
// replay (with several loops, each loop's first request finds a fresh one). An answer larger than the read buffer, in pieces, is read whole.
func TestSendLeanResendsOnAStaleConnection(t *testing.T) {
	forEachSender(t, func(t *testing.T, as func(AttackOptions) AttackOptions) {
		big := `{"error":"OUT_OF_STOCK","pad":"` + strings.Repeat("x", 5000) + `"}`
		addr, accepted := rawServer(t, func(_, k int) (string, bool, bool) {
			if k > 0 {
				return "", true, false
			}
			return fmt.Sprintf("HTTP/1.1 409 Conflict\r\nContent-Length: %d\r\n\r\n%s", len(big), big), false, false
		})
		plan := NewPlan("STALE", Crowd{Requests: 60, Customers: 60, Seed: 1})
		o := as(AttackOptions{Workers: 1, MaxWorkers: 1, Timeout: 5 * time.Second})
		v := sendAnswered(t, "http://"+addr+"/vouchers/STALE/reservations", plan, 600, o)
		for _, sh := range v.Shots {
			require.Equal(t, uint16(409), sh.Status)
			require.Equal(t, "OUT_OF_STOCK", sh.Code)
		}
		firsts := 1 // requests that found a fresh connection: the first (each loop's first)
		if o.Sender == SenderLoop {
			firsts = o.Loops
		}
		require.EqualValues(t, 60-firsts, v.Replays, "every request after the first was resent once")
		require.EqualValues(t, 60, accepted.Load())
	})
}

// A connection opened up front waits idle until the first request, and the
// server may have closed it as idle by then: the request is sent once more on
// a new connection, as on any kept-alive one.
func TestSendLeanResendsOnAnUpFrontConnectionClosed(t *testing.T) {
	forEachSender(t, func(t *testing.T, as func(AttackOptions) AttackOptions) {
		addr, _ := rawServer(t, func(conn, _ int) (string, bool, bool) {
			return conflict, conn == 0, false
		})
		plan := NewPlan("IDLE", Crowd{Requests: 5, Customers: 5, Seed: 1})
		v := sendAnswered(t, "http://"+addr+"/vouchers/IDLE/reservations", plan, 100,
			as(AttackOptions{Workers: 1, MaxWorkers: 1, Timeout: 5 * time.Second}))
		for _, sh := range v.Shots {
			require.Equal(t, uint16(409), sh.Status)
		}
		require.EqualValues(t, 1, v.Replays)
	})
}

// A request never answered fails after Timeout, and one sent to a port
// nobody listens on fails at once; either is a Shot with Req -1 and the
// error, and the other requests are answered.
func TestSendLeanTimeoutsAndRefusals(t *testing.T) {
	forEachSender(t, func(t *testing.T, as func(AttackOptions) AttackOptions) {
		var served atomic.Int64
		addr, _ := rawServer(t, func(int, int) (string, bool, bool) {
			if served.Add(1)%5 == 0 {
				return "", false, true
			}
			return conflict, false, false
		})
		plan := NewPlan("SLOW", Crowd{Requests: 50, Customers: 50, Seed: 1})
		start := time.Now()
		v, err := sendLean(context.Background(), "http://"+addr+"/vouchers/SLOW/reservations", leanBodies(plan), plan, 1000,
			as(AttackOptions{MaxWorkers: 64, Timeout: 300 * time.Millisecond}))
		require.NoError(t, err)
		require.Len(t, v.Shots, 50)
		var failed int
		for _, sh := range v.Shots {
			if sh.Err != "" {
				failed++
				require.EqualValues(t, -1, sh.Req)
				require.GreaterOrEqual(t, sh.Latency, 300*time.Millisecond)
				require.Contains(t, sh.Err, "timeout")
			} else {
				require.Equal(t, uint16(409), sh.Status)
			}
		}
		require.Equal(t, 10, failed, "every fifth request held by the server")
		require.Less(t, time.Since(start), 3*time.Second)

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		closed := ln.Addr().String()
		ln.Close()
		v, err = sendLean(context.Background(), "http://"+closed+"/vouchers/SLOW/reservations", leanBodies(plan), plan, 1000,
			as(AttackOptions{MaxWorkers: 64, Timeout: time.Second}))
		require.NoError(t, err)
		require.Len(t, v.Shots, 50)
		for _, sh := range v.Shots {
			require.EqualValues(t, -1, sh.Req)
			require.Contains(t, sh.Err, "refused")
		}
	})
}

// With MaxWorkers connections all waiting, the rate falls behind: never more
// requests in flight than MaxWorkers, and every one is still sent.
func TestSendLeanHoldsMaxWorkers(t *testing.T) {
	forEachSender(t, func(t *testing.T, as func(AttackOptions) AttackOptions) {
		var inflight, most atomic.Int64
		addr, accepted := rawServer(t, func(int, int) (string, bool, bool) {
			n := inflight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			inflight.Add(-1)
			return conflict, false, false
		})
		plan := NewPlan("MOST", Crowd{Requests: 100, Customers: 100, Seed: 1})
		start := time.Now()
		sendAnswered(t, "http://"+addr+"/vouchers/MOST/reservations", plan, 100_000,
			as(AttackOptions{Workers: 2, MaxWorkers: 5, Timeout: 5 * time.Second}))
		require.LessOrEqual(t, most.Load(), int64(5))
		require.LessOrEqual(t, accepted.Load(), int64(5))
		require.GreaterOrEqual(t, time.Since(start), 100/5*20*time.Millisecond)
	})
}

// Both senders read an answer's head through answerHead: readHead from a
// connection's buffer, parseHead from bytes already read. They agree on
// every head, well formed or not.
func TestAnswerHead(t *testing.T) {
	for _, c := range []struct {
		head           string
		status, length int
		keep           bool
		err            string
	}{
		{head: "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 24\r\n\r\n", status: 409, length: 24, keep: true},
		{head: "HTTP/1.1 201 Created\nconnection: Close\ncontent-length: 7\n\n", status: 201, length: 7},
		{head: "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n\r\n", err: "without Content-Length"},
		{head: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", err: "unexpected Transfer-Encoding"},
		{head: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: "malformed Content-Length"},
		{head: "SMTP ready\r\n\r\n", err: "malformed status line"},
	} {
		for name, read := range map[string]func(string) (int, int, bool, error){
			"readHead": func(h string) (int, int, bool, error) {
				return readHead(bufio.NewReader(strings.NewReader(h + "body")))
			},
			"parseHead": func(h string) (int, int, bool, error) { return parseHead([]byte(h)) },
		} {
			status, length, keep, err := read(c.head)
			if c.err != "" {
				require.ErrorContains(t, err, c.err, "%s(%q)", name, c.head)
				continue
			}
			require.NoError(t, err, "%s(%q)", name, c.head)
			require.Equal(t, []any{c.status, c.length, c.keep}, []any{status, length, keep}, "%s(%q)", name, c.head)
		}
	}
	_, _, _, err := parseHead([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"))
	require.ErrorContains(t, err, "without the blank line")
}
