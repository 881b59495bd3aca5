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
	"slices"
	"strconv"
	"strings"
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

// redactURL drops what may hold a secret (user info, query, fragment) from a
// URL. One that does not parse is not shown at all: which part of it is the
// secret cannot be told.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// redactErr is err of a call to target without target's secrets: Go's
// *url.Error (a refused connection, a timeout) names the whole URL, query
// string and user name included (only a password is masked), and the error
// becomes an event's last_error, served by GET /admin/events?status=failed
// and logged. Whatever of the secrets the inner error still names (a
// redirect's target) is cut out too.
func redactErr(err error, target string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = fmt.Errorf("POST %s: %w", redactURL(target), ue.Err)
	}
	msg := err.Error()
	for _, secret := range urlSecrets(target) {
		msg = strings.ReplaceAll(msg, secret, "REDACTED")
	}
	return errors.New(msg)
}

// minSecret is the shortest part of a URL cut out of an error's text: a
// shorter one would cut words out of the message and hides nothing.
const minSecret = 4

// urlSecrets are the parts of raw that may be a secret: its query string,
// user name, password and fragment (raw and unescaped), longest first.
func urlSecrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return []string{raw}
	}
	var out []string
	add := func(ss ...string) {
		for _, s := range ss {
			if len(s) >= minSecret {
				out = append(out, s)
			}
		}
	}
	add(u.RawQuery, u.Fragment, u.RawFragment)
	if q, err := url.QueryUnescape(u.RawQuery); err == nil {
		add(q)
	}
	for _, vs := range u.Query() {
		add(vs...)
	}
	if u.User != nil {
		add(u.User.String(), u.User.Username())
		if p, ok := u.User.Password(); ok {
			add(p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
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
		return redactErr(err, w.url)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "flashgate-webhook/1")
	req.Header.Set(events.SignatureHeader, events.Sign(w.cfg.Secret, time.Now(), body))
	req.Header.Set("Flashgate-Event-Id", strconv.FormatInt(e.ID, 10))
	req.Header.Set("Flashgate-Event-Type", e.Type)
	resp, err := w.client.Do(req)
	if err != nil {
		return redactErr(err, w.url)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keep the connection
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST %s: %s", redactURL(w.url), resp.Status)
	}
	return nil
}
