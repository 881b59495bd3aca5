// Package load makes a burst's traffic and measures it: the crowd and its
// plan of orders, the attack that fires the plan at a constant or recorded
// pace, the lean transport, the clients that retry as the API asks, the
// answers' latency, the server's own histogram and the machine's CPU.
package load

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/shared/api"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// AttackOptions size the load generator. It is an open model: requests leave at
// the planned rate whether or not earlier ones were answered (vegeta starts more
// workers when all are busy), so a slow server shows up as latency instead of
// as a lower rate, as long as MaxWorkers is not reached.
type AttackOptions struct {
	// Workers are the connections opened up front (the lean sender's; with
	// --sender workers and vegeta, a worker each), before the first request
	// leaves: a crowd's connections end at the load balancer in front of the
	// proxies, which keeps its own open, and wrk and wrk2 open theirs before
	// they measure. 0: UpFront's rule. More start when all are busy, up to
	// MaxWorkers.
	Workers     int
	MaxWorkers  int           // most requests in flight
	Connections int           // idle keep-alive connections kept per host
	Timeout     time.Duration // per request; keep it above the proxy's LEDGER_TIMEOUT
	// Lean sends with sendLean instead of vegeta and Go's http.Transport:
	// a fraction of the generator's CPU per request. The generator shares
	// the stack's CPUs, so it is the default (--lean); off only to compare.
	Lean bool
	// Sender is the lean sender's shape: SenderLoop (one event loop for
	// every connection, as wrk has; the default where the system has epoll)
	// or SenderWorkers (a goroutine per request in flight).
	Sender string
	// Loops is how many event loops SenderLoop runs, each on a goroutine of
	// its own with its share of the requests and of the connections (wrk's
	// threads); one takes at most one CPU.
	Loops int
	// LocalIP, when set, is the address requests are sent from (on loopback
	// any of 127.0.0.0/8): a client at an address of its own, as the edge's
	// per-client limits see it. Empty: the system's choice.
	LocalIP string

	// Schedule, when set (a replay), is when each request leaves, from the
	// start, instead of the constant rate.
	Schedule []time.Duration
	// Results, when set, is also given every answer in vegeta's own result
	// form (vegeta.NewEncoder writes what `vegeta report` and `vegeta plot` read).
	Results vegeta.Encoder
}

// The lean sender's shapes (AttackOptions.Sender).
const (
	SenderLoop    = "loop"
	SenderWorkers = "workers"
)

// DefaultAttack suits one loopback machine.
var DefaultAttack = AttackOptions{Workers: 0, MaxWorkers: 4096, Connections: 4096, Timeout: 15 * time.Second, Lean: true,
	Sender: SenderLoop, Loops: 1}

// upFrontSLO is the answer time the workers started up front are sized
// for: the stack's LATENCY_SLO (100 ms), so a rate answered within it never
// waits for a new connection (Little's law: rate x time in flight).
const upFrontSLO = 100 * time.Millisecond

// minUpFront is the fewest workers started up front (vegeta's default).
const minUpFront = 64

// UpFront is how many workers o starts up front at rate requests a second:
// o.Workers when set, else the requests rate sends in upFrontSLO, at least
// minUpFront; never more than o.MaxWorkers.
func (o AttackOptions) UpFront(rate float64) int {
	n := o.Workers
	if n <= 0 {
		n = max(minUpFront, int(math.Ceil(rate*upFrontSLO.Seconds())))
	}
	return max(min(n, o.MaxWorkers), 1)
}

// Shot is one request's outcome, kept small: a burst holds hundreds of thousands.
type Shot struct {
	Seq     uint64        // vegeta's sequence number: the order requests left in
	Req     int32         // index in the plan; -1 when no answer came back
	Status  uint16        // HTTP status; 0 for a transport error or timeout
	Code    string        // "error" of an error body, such as OUT_OF_STOCK
	OrderID string        // "orderId" of a 201 body
	At      time.Time     // when the request left
	Latency time.Duration // until the whole answer was read
	Err     string        // transport error text
}

// Failed reports whether the shot counts as an error for load purposes: no
// answer, or an answer other than 2xx, 409 (a refusal) or 422 (not eligible).
func (s Shot) Failed() bool {
	return !(s.Status >= 200 && s.Status < 300 || s.Status == http.StatusConflict ||
		s.Status == http.StatusUnprocessableEntity)
}

// Volley is the outcome of one attack.
type Volley struct {
	Rate    float64 // requested, per second
	Shots   []Shot  // in the order answers arrived
	Replays int64   // requests the transport resent on another connection (see idempotencyKey)

	ResultsErr error // the first failure to write AttackOptions.Results
}

// reqHeader carries the plan index of a request; TagTransport copies it onto the
// response so that each result can be tied to its order.
const reqHeader = "X-Loadtest-Req"

// idempotencyKey marks a reserve as safe to resend, as the API makes it (the
// same orderId is the same order): Go's transport then resends a request
// written on a kept-alive connection that the server closed as idle without
// reading it, the race every HTTP/1.1 client has with a server that stops.
const idempotencyKey = "Idempotency-Key"

// TagTransport echoes reqHeader from each request onto its response (vegeta's
// results carry response headers but nothing of the request) and counts the
// requests its base transport sent more than once.
type TagTransport struct {
	Base    http.RoundTripper
	Replays *atomic.Int64
}

// RoundTrip sends req on the base transport, echoes its reqHeader and counts
// a resend.
func (t TagTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var conns int
	req = req.WithContext(httptrace.WithClientTrace(req.Context(),
		&httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns++ }}))
	resp, err := t.Base.RoundTrip(req)
	if conns > 1 {
		t.Replays.Add(1)
	}
	if err == nil && req.Header.Get(reqHeader) != "" {
		resp.Header.Set(reqHeader, req.Header.Get(reqHeader))
	}
	return resp, err
}

// CloseIdleConnections closes the base transport's idle connections.
func (t TagTransport) CloseIdleConnections() {
	if c, ok := t.Base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Fire sends plan's requests to url (POST, JSON bodies) at rate per second and
// returns every answer. It returns early, with what it has, when ctx ends.
func Fire(ctx context.Context, url string, plan Plan, orderAmount int64, rate float64, o AttackOptions) Volley {
	bodies := make([][]byte, len(plan.Orders))
	for i, ord := range plan.Orders {
		bodies[i] = reserveBody(ord, orderAmount)
	}
	if o.Lean {
		if v, err := sendLean(ctx, url, bodies, plan, rate, o); err == nil {
			return v
		}
	}
	n := len(plan.Requests)
	var next atomic.Int64 // workers call the targeter concurrently
	targeter := func(t *vegeta.Target) error {
		i := int(next.Add(1) - 1)
		if i >= n {
			return vegeta.ErrNoTargets
		}
		t.Method = http.MethodPost
		t.URL = url
		t.Body = bodies[plan.Requests[i]]
		t.Header = http.Header{"Content-Type": {"application/json"}, reqHeader: {strconv.Itoa(i)},
			idempotencyKey: {plan.Orders[plan.Requests[i]].ID}}
		return nil
	}
	var pacer vegeta.Pacer = countedPacer{ConstantPacer: vegeta.Rate{Freq: max(int(rate), 1), Per: time.Second}, n: uint64(n)}
	if o.Schedule != nil {
		pacer = schedulePacer{at: o.Schedule[:min(len(o.Schedule), n)]}
	}

	var replays atomic.Int64
	var base http.RoundTripper = newLeanTransport(o.Timeout, o.Connections, &replays)
	if !o.Lean {
		base = newNetTransport(o)
	}
	defer base.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	atk := vegeta.NewAttacker(
		vegeta.Client(&http.Client{Transport: TagTransport{base, &replays}, Timeout: o.Timeout}),
		vegeta.Workers(uint64(o.UpFront(rate))),
		vegeta.MaxWorkers(uint64(max(o.MaxWorkers, 1))),
		vegeta.MaxBody(4<<10),
	)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()

	v := Volley{Rate: rate, Shots: make([]Shot, 0, n)}
	for res := range atk.Attack(targeter, pacer, 0, "burst") {
		v.Shots = append(v.Shots, shotOf(res))
		if o.Results != nil && v.ResultsErr == nil {
			v.ResultsErr = o.Results(res)
		}
	}
	v.Replays = replays.Load()
	return v
}

// newNetTransport is Go's transport sized by o. vegeta.Connections and
// vegeta.KeepAlive configure vegeta's own transport; Fire's client replaces it
// (to tag answers), so the same settings are made here: keep-alive on,
// o.Connections idle connections per host.
func newNetTransport(o AttackOptions) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, LocalAddr: LocalTCPAddr(o.LocalIP)}).DialContext,
		MaxIdleConns:        o.Connections,
		MaxIdleConnsPerHost: o.Connections,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}

// LocalTCPAddr is a dialer's LocalAddr for sending from ip (any port); nil
// for "" (the system's choice). An address that does not parse is nil too,
// and the send then shows where it came from in the server's view.
func LocalTCPAddr(ip string) net.Addr {
	if parsed := net.ParseIP(ip); parsed != nil {
		return &net.TCPAddr{IP: parsed}
	}
	return nil
}

// ReserveURL is where a reserve of voucher code is POSTed on base, the URL of
// a proxy (or of the ceiling server).
func ReserveURL(base, code string) string {
	return base + api.ReservationsPath(code)
}

// reserveBody is o's reserve body, for amount unless o has its own (a replay).
func reserveBody(o Order, amount int64) []byte {
	amount = cmp.Or(o.Amount, amount)
	b := make([]byte, 0, 96)
	b = append(b, `{"customerId":`...)
	b = strconv.AppendInt(b, o.Customer, 10)
	b = append(b, `,"orderId":"`...)
	b = append(b, o.ID...)
	b = append(b, `","orderAmount":`...)
	b = strconv.AppendInt(b, amount, 10)
	return append(b, '}')
}

func shotOf(r *vegeta.Result) Shot {
	s := Shot{Seq: r.Seq, Req: -1, Status: r.Code, At: r.Timestamp, Latency: r.Latency}
	if r.Code == 0 {
		s.Err = r.Error
		return s
	}
	if i, err := strconv.Atoi(r.Headers.Get(reqHeader)); err == nil {
		s.Req = int32(i)
	}
	if r.Code == http.StatusCreated {
		s.OrderID = jsonString(r.Body, "orderId")
	} else if r.Code >= 300 {
		s.Code = jsonString(r.Body, "error")
	}
	return s
}

// jsonString returns the string value of key in the flat JSON object body, or "".
// It looks for the compact form Go's encoder writes first and parses properly
// only when that fails: it runs for every answer, on the machine under test.
func jsonString(body []byte, key string) string {
	pat := make([]byte, 0, len(key)+4)
	pat = append(append(append(pat, '"'), key...), `":"`...)
	if i := bytes.Index(body, pat); i >= 0 {
		rest := body[i+len(pat):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 && bytes.IndexByte(rest[:j], '\\') < 0 {
			return string(rest[:j])
		}
	}
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	s, _ := m[key].(string)
	return s
}

// PostReserve sends one reserve for o and returns its answer, with the
// Retry-After of a 503 (0 when none).
func PostReserve(ctx context.Context, client *http.Client, url string, o Order) (Shot, time.Duration) {
	s := Shot{Req: -1, At: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(reserveBody(o, OrderAmount)))
	if err != nil {
		s.Err = err.Error()
		return s, 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(idempotencyKey, o.ID)
	resp, err := client.Do(req)
	if err != nil {
		s.Latency, s.Err = time.Since(s.At), err.Error()
		return s, 0
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	s.Latency = time.Since(s.At)
	if err != nil {
		s.Err = err.Error()
		return s, 0
	}
	s.Status = uint16(resp.StatusCode)
	if s.Status == http.StatusCreated {
		s.OrderID = jsonString(raw, "orderId")
	} else if s.Status >= 300 {
		s.Code = jsonString(raw, "error")
	}
	var wait time.Duration
	if n, err := strconv.Atoi(resp.Header.Get(api.HeaderRetryAfter)); err == nil && n > 0 {
		wait = time.Duration(n) * time.Second
	}
	return s, wait
}

// StatusKey names an answer for counting: "201", "409 OUT_OF_STOCK", "transport error".
func StatusKey(s Shot) string {
	switch {
	case s.Status == 0:
		return "transport error"
	case s.Code != "":
		return strconv.Itoa(int(s.Status)) + " " + s.Code
	}
	return strconv.Itoa(int(s.Status))
}
