package outbox

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/flashgate/flashgate/shared/envconf"
)

// Config is the outbox's part of the ledger's settings.
type Config struct {
	On          bool          // EVENTS: off only to measure the outbox's cost (nothing is told then)
	WebhookURLs []string      // WEBHOOK_URLS, comma-separated
	Webhook     WebhookConfig // WEBHOOK_SECRET, WEBHOOK_MAX_ATTEMPTS, WEBHOOK_TIMEOUT, WEBHOOK_BACKOFF, WEBHOOK_BACKOFF_MAX
	Brokers     []string      // KAFKA_BROKERS, comma-separated host:port
	Topic       string        // KAFKA_TOPIC
	Retention   time.Duration // EVENT_RETENTION
}

// minWebhookSecret is the shortest WEBHOOK_SECRET accepted: a short key makes
// the signature guessable.
const minWebhookSecret = 16

// minEventRetention is EVENT_RETENTION's floor: a consumer of the pull feed
// needs some time to read what was delivered.
const minEventRetention = time.Minute

// ReadConfig reads the outbox's settings and refuses those that break a promise.
func ReadConfig(e *envconf.Reader) (Config, error) {
	c := Config{
		On:          e.Switch("EVENTS", true, "off: no events are written (only to measure the outbox's cost)"),
		WebhookURLs: splitList(e.String("WEBHOOK_URLS", "", "comma-separated http(s) URLs that get every event, signed")),
		Webhook: WebhookConfig{
			Secret:      e.String("WEBHOOK_SECRET", "", "HMAC-SHA256 key of Flashgate-Signature; at least 16 characters, required with WEBHOOK_URLS"),
			MaxAttempts: e.Int("WEBHOOK_MAX_ATTEMPTS", 10, 1, "attempts per event and URL before it is parked as failed"),
			Timeout:     e.Duration("WEBHOOK_TIMEOUT", 5*time.Second, "deadline of one webhook POST"),
			Backoff:     e.Duration("WEBHOOK_BACKOFF", time.Second, "wait after a failed attempt, doubled each time, with jitter"),
			BackoffMax:  e.Duration("WEBHOOK_BACKOFF_MAX", time.Minute, "longest wait between attempts"),
		},
		Brokers:   splitList(e.String("KAFKA_BROKERS", "", "comma-separated host:port seed brokers; when set, every event goes to KAFKA_TOPIC")),
		Topic:     e.String("KAFKA_TOPIC", "flashgate.events", "the Kafka topic (create it first)"),
		Retention: e.DurationMin("EVENT_RETENTION", 168*time.Hour, minEventRetention, "delivered events older than this are pruned"),
	}
	if err := e.Err(); err != nil {
		return c, err
	}
	return c, c.check()
}

func (c Config) check() error {
	if !c.On && (len(c.WebhookURLs) > 0 || len(c.Brokers) > 0) {
		return errors.New("EVENTS=off writes no events: WEBHOOK_URLS and KAFKA_BROKERS must be empty with it")
	}
	names := map[string]bool{}
	for _, raw := range c.WebhookURLs {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("WEBHOOK_URLS must be absolute http or https URLs separated by commas, not %q", redactURL(raw))
		}
		if names[redactURL(raw)] {
			return fmt.Errorf("WEBHOOK_URLS names %s twice (query and user info aside)", redactURL(raw))
		}
		names[redactURL(raw)] = true
	}
	if len(c.WebhookURLs) > 0 && len(c.Webhook.Secret) < minWebhookSecret {
		return fmt.Errorf("WEBHOOK_SECRET must be at least %d characters when WEBHOOK_URLS is set: receivers check the signature with it",
			minWebhookSecret)
	}
	if c.Webhook.BackoffMax < c.Webhook.Backoff {
		return fmt.Errorf("WEBHOOK_BACKOFF_MAX (%s) must be at least WEBHOOK_BACKOFF (%s)", c.Webhook.BackoffMax, c.Webhook.Backoff)
	}
	for _, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return fmt.Errorf("KAFKA_BROKERS must be host:port pairs separated by commas, not %q", b)
		}
	}
	if len(c.Brokers) > 0 && strings.TrimSpace(c.Topic) == "" {
		return errors.New("KAFKA_TOPIC must not be empty when KAFKA_BROKERS is set")
	}
	return nil
}

// splitList splits a comma-separated setting, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Sinks builds the configured sinks; closeAll disconnects them.
func (c Config) Sinks(m *Metrics) (sinks []Sink, closeAll func(), err error) {
	wc := c.Webhook
	wc.Metrics = m
	for _, u := range c.WebhookURLs {
		sinks = append(sinks, NewWebhook(u, wc))
	}
	closeAll = func() {}
	if len(c.Brokers) > 0 {
		k, err := NewKafka(c.Brokers, c.Topic, m)
		if err != nil {
			return nil, nil, fmt.Errorf("KAFKA_BROKERS: %w", err)
		}
		sinks, closeAll = append(sinks, k), k.Close
	}
	return sinks, closeAll, nil
}
