package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// LedgerClient calls the ledger. Any failure to get an answer (refused,
// timed out, cut) is voucher.ErrUnavailable for the client: it retries with the
// same orderId, which is always safe.
type LedgerClient struct {
	base    string
	token   string
	http    *http.Client
	latency *prometheus.HistogramVec // by call; nil: not observed
}

// NewLedgerClient returns a client for the ledger at base (http://host:port).
func NewLedgerClient(base, token string, timeout time.Duration) *LedgerClient {
	return &LedgerClient{
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
	}
}

// Reply is a ledger answer relayed as it is: the proxy serves the same bodies.
type Reply struct {
	Status int
	Body   []byte
}

// ObserveLatency makes the client record each call's latency in h (label: call).
func (l *LedgerClient) ObserveLatency(h *prometheus.HistogramVec) { l.latency = h }

// Do sends one request to the ledger and returns its answer. call names the
// request in the latency metric.
func (l *LedgerClient) Do(ctx context.Context, call, method, path string, body any) (Reply, error) {
	if l.latency != nil {
		defer func(start time.Time) {
			l.latency.WithLabelValues(call).Observe(time.Since(start).Seconds())
		}(time.Now())
	}
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return Reply{}, fmt.Errorf("encode %s: %w", path, err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequestWithContext(ctx, method, l.base+path, rd)
	if err != nil {
		return Reply{}, fmt.Errorf("ledger request %s: %w", path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if l.token != "" {
		req.Header.Set("Authorization", "Bearer "+l.token)
	}
	if id := httpx.RequestIDFrom(ctx); id != "" {
		req.Header.Set(httpx.RequestIDHeader, id)
	}
	resp, err := l.http.Do(req)
	if err != nil {
		return Reply{}, fmt.Errorf("ledger %s %s: %v: %w", method, path, err, voucher.ErrUnavailable)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Reply{}, fmt.Errorf("ledger %s %s: read: %v: %w", method, path, err, voucher.ErrUnavailable)
	}
	return Reply{Status: resp.StatusCode, Body: raw}, nil
}

// Voucher reads a voucher from the ledger's admin route.
func (l *LedgerClient) Voucher(ctx context.Context, code string) (voucher.Voucher, error) {
	rep, err := l.Do(ctx, "voucher", http.MethodGet, "/admin/vouchers/"+url.PathEscape(code), nil)
	if err != nil {
		return voucher.Voucher{}, err
	}
	if rep.Status != http.StatusOK {
		return voucher.Voucher{}, rep.err()
	}
	var v voucher.Voucher
	if err := json.Unmarshal(rep.Body, &v); err != nil {
		return voucher.Voucher{}, fmt.Errorf("decode voucher %s: %v: %w", code, err, voucher.ErrUnavailable)
	}
	return v, nil
}

// Warmup asks the ledger to load a flash voucher into Redis.
func (l *LedgerClient) Warmup(ctx context.Context, code string) error {
	rep, err := l.Do(ctx, "warmup", http.MethodPost, "/admin/vouchers/"+url.PathEscape(code)+"/warmup", nil)
	if err != nil {
		return err
	}
	if rep.Status != http.StatusOK {
		return rep.err()
	}
	return nil
}

// err turns a ledger error answer back into the domain error it carries.
func (r Reply) err() error {
	var body struct{ Error, Message, Reason string }
	if json.Unmarshal(r.Body, &body) != nil || body.Error == "" {
		return fmt.Errorf("ledger answered %d: %w", r.Status, voucher.ErrUnavailable)
	}
	return &voucher.Error{Code: body.Error, Message: body.Message, Reason: body.Reason}
}

// WriteAdmitted sends claims the gate admitted together to the ledger's batch
// route in one request and returns each one's answer as the single route would
// have given it. A batch.Func: the proxy's forwarder batches per voucher.
func (l *LedgerClient) WriteAdmitted(ctx context.Context, code string, claims []voucher.Claim) ([]Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, l.http.Timeout)
	defer cancel()
	rep, err := l.Do(ctx, "admitted_write", http.MethodPost,
		"/internal/vouchers/"+url.PathEscape(code)+"/reservations/batch", map[string]any{"claims": claims})
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
	var body struct {
		Results []struct {
			Status int             `json:"status"`
			Body   json.RawMessage `json:"body"`
		} `json:"results"`
	}
	if err := json.Unmarshal(rep.Body, &body); err != nil || len(body.Results) != len(claims) {
		return nil, fmt.Errorf("ledger batch answer for %s: %d results for %d claims (%v): %w",
			code, len(body.Results), len(claims), err, voucher.ErrUnavailable)
	}
	for i, r := range body.Results {
		out[i] = Reply{Status: r.Status, Body: r.Body}
	}
	return out, nil
}
