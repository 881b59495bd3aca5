// Package client is the Go client of flashgate's HTTP API for checkout
// services and payment callbacks (Reserve, Confirm, Release, Refund, Get on
// the proxy or the ledger) and for operators (the ledger's admin routes).
//
// Every error the service answered with a code is a *voucher.Error, so a
// caller switches on its Code (voucher.CodeOutOfStock, CodeAlreadyUsed, ...);
// a 503 or a 429 RATE_LIMITED (or no answer at all) is retried with the same
// orderId after the answer's Retry-After, plus a jitter of its own (up to half
// as long again, so that clients told the same second do not come back in the
// same instant), until the context's deadline (or the client's retry
// window when the context has none), and the last failure is returned wrapped
// around voucher.ErrUnavailable. Every request carries an X-Request-ID: the
// one put on the context with WithRequestID, or a new one per call, kept for
// the retries of that call so that the services' logs tie them together.
//
// Its methods take and return the wire types of shared/api (api.Receipt,
// api.Confirmation, api.VoucherPage, ...) and the domain types whose JSON is
// their wire form (voucher.Claim, voucher.Voucher): it declares no body of its
// own, so what it decodes is what the services answer and openapi.yaml says.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
	"github.com/flashgate/flashgate/shared/wait"
)

// Client calls one flashgate service (a proxy, a ledger, or a balancer in front
// of them). It is safe for concurrent use.
type Client struct {
	base     string
	token    string
	http     *http.Client
	retryFor time.Duration
	observe  func(method, path string, status int)
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" (PROXY_TOKEN on a proxy,
// LEDGER_TOKEN or a LEDGER_TOKENS token on a ledger).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sends the requests with h (its Timeout bounds each attempt).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithRetryFor bounds how long a call keeps retrying 503s when its context has
// no deadline (default 10s); 0 turns retries off for such calls.
func WithRetryFor(d time.Duration) Option { return func(c *Client) { c.retryFor = d } }

// WithAttemptHook calls observe after every attempt of every call, retries
// included, with the status answered (0: no answer); a load harness counts
// them.
func WithAttemptHook(observe func(method, path string, status int)) Option {
	return func(c *Client) { c.observe = observe }
}

// New returns a client of the service at base, e.g. "http://127.0.0.1:8080".
func New(base string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(base, "/"), http: &http.Client{Timeout: 5 * time.Second}, retryFor: 10 * time.Second}
	for _, o := range opts {
		o(c)
	}
	return c
}

type requestIDKey struct{}

// WithRequestID returns ctx whose calls send id as X-Request-ID (at most 64
// printable ASCII characters, else the service makes its own).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

type checkoutTokenKey struct{}

// WithCheckoutToken returns ctx whose calls send token as X-Checkout-Token:
// a reserve of a voucher that requires one (requireCheckoutToken) carries
// the token the shop minted for it (checkout.Keys.Mint).
func WithCheckoutToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, checkoutTokenKey{}, token)
}

func requestID(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok && id != "" {
		return id
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	return hex.EncodeToString(b[:])
}

// Response is what a call's final answer carried besides its body.
type Response struct {
	Status    int
	Header    http.Header
	RequestID string
	Attempts  int // 1 when the first answer was final
}

// noAnswerWait is the wait before retrying a call that got no answer, as for
// a 503 without Retry-After: a service that is down is not hammered.
const noAnswerWait = time.Second

// maxRetryAfter caps one wait: a service asking for longer still gets asked
// again within it.
const maxRetryAfter = 5 * time.Second

// do sends one call, retrying a 503 or a missing answer as the package doc
// says, and decodes a 2xx body into out (when out is non-nil and there is a
// body). Any other status becomes the *voucher.Error of its body.
func (c *Client) do(ctx context.Context, method, path string, body, out any) (Response, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return Response{}, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
	}
	_, retry := ctx.Deadline()
	if !retry && c.retryFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.retryFor)
		defer cancel()
		retry = true
	}
	id := requestID(ctx)
	for attempt := 1; ; attempt++ {
		resp, after, err := c.attempt(ctx, method, path, id, payload, out)
		resp.Attempts = attempt
		if c.observe != nil {
			c.observe(method, path, resp.Status)
		}
		if after < 0 || !retry {
			return resp, err
		}
		if !wait.Within(ctx, jitter(after)) {
			return resp, fmt.Errorf("%s %s: no answer but 503 until the deadline after %d attempts: %w", method, path, attempt, err)
		}
	}
}

// attempt sends the request once. wait >= 0 asks for a retry after it.
func (c *Client) attempt(ctx context.Context, method, path, id string, payload []byte, out any) (Response, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(payload))
	if err != nil {
		return Response{}, -1, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if c.token != "" {
		req.Header.Set(api.HeaderAuthorization, api.Bearer(c.token))
	}
	req.Header.Set(api.HeaderRequestID, id)
	if token, _ := ctx.Value(checkoutTokenKey{}).(string); token != "" {
		req.Header.Set(api.HeaderCheckoutToken, token)
	}
	hr, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Response{RequestID: id}, -1, fmt.Errorf("%s %s: %w: %w", method, path, err, voucher.ErrUnavailable)
		}
		// No answer: nothing is known either way, and every route is safe to
		// repeat (by orderId, or a read): again after noAnswerWait.
		return Response{RequestID: id}, noAnswerWait, fmt.Errorf("%s %s: %w: %w", method, path, err, voucher.ErrUnavailable)
	}
	defer hr.Body.Close()
	resp := Response{Status: hr.StatusCode, Header: hr.Header, RequestID: hr.Header.Get(api.HeaderRequestID)}
	raw, err := io.ReadAll(io.LimitReader(hr.Body, 32<<20))
	if err != nil {
		return resp, noAnswerWait, fmt.Errorf("%s %s: read the answer: %w: %w", method, path, err, voucher.ErrUnavailable)
	}
	switch {
	case hr.StatusCode >= 200 && hr.StatusCode < 300:
		if rb, ok := out.(*rawBody); ok {
			*rb = raw
			return resp, -1, nil
		}
		if out != nil && len(raw) > 0 {
			if err := json.Unmarshal(raw, out); err != nil {
				return resp, -1, fmt.Errorf("%s %s: decode the %d answer: %w", method, path, hr.StatusCode, err)
			}
		}
		return resp, -1, nil
	case hr.StatusCode == http.StatusServiceUnavailable || hr.StatusCode == http.StatusTooManyRequests:
		return resp, retryAfter(hr.Header), fmt.Errorf("%s %s: %w", method, path, decodeError(hr.StatusCode, raw))
	}
	return resp, -1, decodeError(hr.StatusCode, raw)
}

// decodeError returns the *voucher.Error of an error answer's body; a body
// without a code (a balancer's page) is a fault, voucher.ErrUnavailable.
func decodeError(status int, raw []byte) error {
	var b api.ErrorBody
	if json.Unmarshal(raw, &b) != nil || b.Error == "" {
		return fmt.Errorf("answered %d without an error code: %w", status, voucher.ErrUnavailable)
	}
	return &voucher.Error{Code: b.Error, Message: b.Message, Reason: b.Reason}
}

// retryAfter reads Retry-After in seconds (1 s when absent or malformed).
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get(api.HeaderRetryAfter))
	if err != nil || n < 0 {
		return time.Second
	}
	return min(time.Duration(n)*time.Second, maxRetryAfter)
}

// jitter returns d plus a uniform 0 to d/2: the client's own spread on top of
// the service's (Retry-After is drawn per answer, but in whole seconds).
func jitter(d time.Duration) time.Duration {
	return d + mrand.N(d/2+1)
}

// IsCode reports whether err carries the voucher error code.
func IsCode(err error, code string) bool { return voucher.ErrorCode(err) == code }
