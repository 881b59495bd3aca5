// Package ledger is the proxy's side of the ledger: its client (Client,
// Reply), the batched writes of admitted claims (Writer), the hand-over of
// admissions whose fate is unknown (HandOver), the start's check of the
// ledger's settings, warm connections, and the readiness probe behind the
// proxy's /readyz.
package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Client calls the ledger. Any failure to get an answer (refused,
// timed out, cut) is voucher.ErrUnavailable for the client: it retries with the
// same orderId, which is always safe. Each call has a deadline (LEDGER_TIMEOUT)
// and passes a circuit breaker, like the one on Redis: after 5 calls in a row
// got no answer, calls are refused at once for a second, then one trial call
// decides. A stopped or hung ledger then costs one timeout for the requests
// already waiting and a fast 503 for everyone after.
type Client struct {
	base    string
	token   string
	http    *http.Client
	latency *httpx.Resolved[string, prometheus.Observer] // by call; nil: not observed
	breaker *gobreaker.CircuitBreaker[*http.Response]
	log     *slog.Logger // breaker state changes
}

// NewClient returns a client for the ledger at base (http://host:port).
func NewClient(base, token string, timeout time.Duration) *Client {
	l := &Client{
		base:  base,
		token: token,
		http: &http.Client{
			Timeout: timeout,
			Transport: &http.Transport{
				MaxIdleConns:        1024,
				MaxIdleConnsPerHost: 1024,
				IdleConnTimeout:     90 * time.Second,
			},
		},
		log: slog.New(slog.DiscardHandler),
	}
	l.breaker = gobreaker.NewCircuitBreaker[*http.Response](gobreaker.Settings{
		Name:        "ledger",
		MaxRequests: 1,
		Timeout:     time.Second, // open for 1s, then one trial call
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
		// A caller that left (its client hung up) says nothing about the ledger.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			l.log.Warn("ledger circuit breaker", "from", from.String(), "to", to.String())
		},
	})
	return l
}

// ObserveBreaker logs the breaker's state changes to log and exports its
// state as flashgate_ledger_breaker_state on reg.
func (l *Client) ObserveBreaker(reg prometheus.Registerer, log *slog.Logger) {
	l.log = log
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flashgate_ledger_breaker_state",
		Help: "Ledger circuit breaker: 0 closed, 1 half-open, 2 open.",
	}, func() float64 { return BreakerState(l.breaker.State()) }))
}

// Reply is a ledger answer relayed as it is: the proxy serves the same bodies.
// Err is what an error answer means, read from its body once, here.
type Reply struct {
	Status   int
	Body     []byte
	Err      error // nil for a 2xx; the domain error the body carries otherwise
	Replayed bool  // the ledger replayed the order's first answer
	Shed     bool  // the ledger shed the request before working on it (api.HeaderShed)
}

// newReply reads a ledger answer: an error body ({"error", "message",
// "reason"}) becomes the *voucher.Error it carries; one that does not parse is
// a fault (the ledger's 503 has a body; a proxy or load balancer in between
// may answer without one).
func newReply(status int, body []byte) Reply {
	rep := Reply{Status: status, Body: body}
	if status >= 200 && status < 300 {
		return rep
	}
	var e api.ErrorBody
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		rep.Err = fmt.Errorf("ledger answered %d: %w", status, voucher.ErrUnavailable)
		return rep
	}
	rep.Err = &voucher.Error{Code: e.Error, Message: e.Message, Reason: e.Reason}
	return rep
}

// Outcome names the answer for the metrics: CREATED or the error code.
func (r Reply) Outcome() string {
	if r.Status == http.StatusCreated {
		return "CREATED"
	}
	if code := voucher.ErrorCode(r.Err); code != "" {
		return code
	}
	return voucher.CodeUnavailable
}

// ObserveLatency makes the client record each call's latency in h (label: call).
func (l *Client) ObserveLatency(h *prometheus.HistogramVec) {
	l.latency = httpx.NewResolved(func(call string) prometheus.Observer { return h.WithLabelValues(call) })
}

// Do sends one request to the ledger and returns its answer. call names the
// request in the latency metric.
func (l *Client) Do(ctx context.Context, call, method, path string, body any) (Reply, error) {
	if l.latency != nil {
		defer func(start time.Time) {
			l.latency.Get(call).Observe(time.Since(start).Seconds())
		}(time.Now())
	}
	req, err := l.newRequest(ctx, method, path, body)
	if err != nil {
		return Reply{}, err
	}
	resp, err := l.breaker.Execute(func() (*http.Response, error) { return l.http.Do(req) })
	if err != nil {
		return Reply{}, fmt.Errorf("ledger %s %s: %w: %w", method, path, err, voucher.ErrUnavailable)
	}
	return readReply(method, path, resp)
}

// probe sends one GET to the ledger past the circuit breaker: the start's
// check, whose failures say nothing yet about a serving ledger (they would
// open the breaker and hide their cause behind it) and keep that cause
// (connection refused, no such host) as it is.
func (l *Client) probe(ctx context.Context, path string) (Reply, error) {
	req, err := l.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return Reply{}, err
	}
	resp, err := l.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the cause without the URL, which the caller names
		}
		return Reply{}, err
	}
	return readReply(http.MethodGet, path, resp)
}

// newRequest is a request to the ledger with its token and the request id.
func (l *Client) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", path, err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, l.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("ledger request %s: %w", path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Every call to the ledger is idempotent (by orderId, or a read): so
	// marked, Go's transport sends it again on a new connection when the
	// ledger closed the kept-alive one it went out on (a restart draining its
	// connections), instead of answering 503 for a race on an idle socket.
	req.Header.Set(idempotencyKey, "ledger")
	if l.token != "" {
		req.Header.Set(api.HeaderAuthorization, api.Bearer(l.token))
	}
	if id := httpx.RequestIDFrom(ctx); id != "" {
		req.Header.Set(api.HeaderRequestID, id)
	}
	return req, nil
}

// idempotencyKey is the header by which Go's http.Transport tells a request
// it may send again (Request.isReplayable).
const idempotencyKey = "Idempotency-Key"

// readReply reads resp, the ledger's answer to method path, and closes it.
func readReply(method, path string, resp *http.Response) (Reply, error) {
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Reply{}, fmt.Errorf("ledger %s %s: read: %w: %w", method, path, err, voucher.ErrUnavailable)
	}
	rep := newReply(resp.StatusCode, raw)
	rep.Replayed = resp.Header.Get(api.HeaderReplayed) == "true"
	rep.Shed = resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(api.HeaderShed) != ""
	return rep, nil
}

// Voucher reads a voucher from the ledger's admin route.
func (l *Client) Voucher(ctx context.Context, code string) (voucher.Voucher, error) {
	rep, err := l.Do(ctx, "voucher", http.MethodGet, api.VoucherPath(code), nil)
	if err != nil {
		return voucher.Voucher{}, err
	}
	if rep.Status != http.StatusOK {
		return voucher.Voucher{}, rep.Err
	}
	var v voucher.Voucher
	if err := json.Unmarshal(rep.Body, &v); err != nil {
		return voucher.Voucher{}, fmt.Errorf("decode voucher %s: %w: %w", code, err, voucher.ErrUnavailable)
	}
	return v, nil
}

// VoucherCodes reads the code of every voucher, page after page of
// api.VoucherCodesPath.
func (l *Client) VoucherCodes(ctx context.Context) ([]string, error) {
	var codes []string
	for after := ""; ; {
		path := api.VoucherCodesPath
		if after != "" {
			path += "?after=" + url.QueryEscape(after)
		}
		rep, err := l.Do(ctx, "voucher_codes", http.MethodGet, path, nil)
		if err != nil {
			return nil, err
		}
		if rep.Status != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %w", path, rep.Err)
		}
		var page api.VoucherCodes
		if err := json.Unmarshal(rep.Body, &page); err != nil {
			return nil, fmt.Errorf("decode %s: %w: %w", path, err, voucher.ErrUnavailable)
		}
		codes = append(codes, page.Codes...)
		if page.Next == nil || *page.Next <= after {
			return codes, nil
		}
		after = *page.Next
	}
}

// Warmup asks the ledger to load a flash voucher into Redis.
func (l *Client) Warmup(ctx context.Context, code string) error {
	rep, err := l.Do(ctx, "warmup", http.MethodPost, api.Fill(api.RouteWarmup, code), nil)
	if err != nil {
		return err
	}
	if rep.Status != http.StatusOK {
		return rep.Err
	}
	return nil
}

// writeAdmitted sends claims the gate admitted together to the ledger's batch
// route in one request and returns each one's answer as the single route would
// have given it. A batch.Func: Writer batches per voucher.
func (l *Client) writeAdmitted(ctx context.Context, code string, claims []voucher.Claim) ([]Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, l.http.Timeout)
	defer cancel()
	rep, err := l.Do(ctx, "admitted_write", http.MethodPost,
		api.Fill(api.RouteAdmittedBatch, code), api.BatchRequest{Claims: claims})
	if err != nil {
		return nil, err
	}
	out := make([]Reply, len(claims))
	if rep.Status != http.StatusOK {
		for i := range out {
			out[i] = rep // the whole batch was refused (auth, unknown voucher, a fault)
		}
		return out, nil
	}
	var body api.BatchReply[json.RawMessage]
	if err := json.Unmarshal(rep.Body, &body); err != nil || len(body.Results) != len(claims) {
		return nil, fmt.Errorf("ledger batch answer for %s: %d results for %d claims (%v): %w",
			code, len(body.Results), len(claims), err, voucher.ErrUnavailable)
	}
	for i, r := range body.Results {
		out[i] = newReply(r.Status, r.Body)
		out[i].Replayed = r.Replayed
	}
	return out, nil
}
