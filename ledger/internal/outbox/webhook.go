package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/events"
)

// WebhookConfig is how every webhook sink sends.
type WebhookConfig struct {
	Secret      string        // WEBHOOK_SECRET: the HMAC key of Flashgate-Signature
	MaxAttempts int           // WEBHOOK_MAX_ATTEMPTS: then the event is parked as failed
	Timeout     time.Duration // WEBHOOK_TIMEOUT: one POST, answer included
	Backoff     time.Duration // WEBHOOK_BACKOFF: the wait after the first failure, doubled each time
	BackoffMax  time.Duration // WEBHOOK_BACKOFF_MAX: the longest wait
	Parallel    int           // vouchers whose events are sent at once (each voucher's in order)
	Metrics     *Metrics
}

// Webhook POSTs each event as JSON to one URL, signed. A voucher's events go
// one after the other, in id order: a failing one is retried (backoff with
// jitter) before the next of its voucher is sent, and parked after
// MaxAttempts so that the later ones go on. Different vouchers go in parallel.
type Webhook struct {
	url    string
	name   string
	cfg    WebhookConfig
	client *http.Client
}

// NewWebhook returns the sink of target (an absolute http or https URL).
func NewWebhook(target string, cfg WebhookConfig) *Webhook {
	if cfg.Parallel <= 0 {
		cfg.Parallel = 16
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Webhook{
		url: target, name: sinkName("webhook", redactURL(target)), cfg: cfg,
		client: &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Parallel}},
	}
}

// redactURL drops what may hold a secret (user info, query) from a URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// Name implements Sink.
func (w *Webhook) Name() string { return w.name }

// errStopped ends a delivery told to stop between two attempts.
var errStopped = errors.New("stopping between delivery attempts")

// Deliver implements Sink.
func (w *Webhook) Deliver(ctx context.Context, stop <-chan struct{}, evs []events.Event) ([]store.Parked, error) {
	var order []string
	byVoucher := map[string][]events.Event{}
	for _, e := range evs {
		if _, ok := byVoucher[e.VoucherCode]; !ok {
			order = append(order, e.VoucherCode)
		}
		byVoucher[e.VoucherCode] = append(byVoucher[e.VoucherCode], e)
	}
	var (
		mu       sync.Mutex
		parked   []store.Parked
		firstErr error
		wg       sync.WaitGroup
	)
	slots := make(chan struct{}, w.cfg.Parallel)
	for _, code := range order {
		slots <- struct{}{}
		wg.Add(1)
		go func(evs []events.Event) {
			defer func() { <-slots; wg.Done() }()
			for _, e := range evs {
				p, err := w.deliverOne(ctx, stop, e)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if p != nil {
					parked = append(parked, *p)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}(byVoucher[code])
	}
	wg.Wait()
	return parked, firstErr
}

// deliverOne sends e until it is accepted or its attempts are spent (it is
// then returned, parked).
func (w *Webhook) deliverOne(ctx context.Context, stop <-chan struct{}, e events.Event) (*store.Parked, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("event %d: %w", e.ID, err)
	}
	for attempt := 1; ; attempt++ {
		err := w.post(ctx, e, body)
		if err == nil {
			return nil, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		w.cfg.Metrics.eventErrors.WithLabelValues(w.name).Inc()
		if attempt >= w.cfg.MaxAttempts {
			return &store.Parked{Event: e, Sink: w.name, Status: "FAILED", Attempts: attempt, LastError: err.Error()}, nil
		}
		select {
		case <-stop:
			return nil, errStopped
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff(attempt, w.cfg.Backoff, w.cfg.BackoffMax, rand.Float64)):
		}
	}
}

// post sends one signed POST; any 2xx answer is a delivery.
func (w *Webhook) post(ctx context.Context, e events.Event, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "flashgate-webhook/1")
	req.Header.Set(events.SignatureHeader, events.Sign(w.cfg.Secret, time.Now(), body))
	req.Header.Set("Flashgate-Event-Id", strconv.FormatInt(e.ID, 10))
	req.Header.Set("Flashgate-Event-Type", e.Type)
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keep the connection
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST %s: %s", redactURL(w.url), resp.Status)
	}
	return nil
}
