package admissions

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/flashgate/flashgate/shared/envconf"
)

// Config is the admissions log's part of the ledger's settings.
type Config struct {
	Brokers []string // KAFKA_ADMISSIONS_BROKERS, else KAFKA_BROKERS; empty: log vouchers answer 503
	Topic   string   // KAFKA_ADMISSIONS_TOPIC
	Group   string   // KAFKA_ADMISSIONS_GROUP
	// SessionTimeout is KAFKA_ADMISSIONS_SESSION_TIMEOUT: how long the group
	// waits for a member that stopped heartbeating before its partitions go
	// to the others.
	SessionTimeout time.Duration
}

// DefaultSessionTimeout is KAFKA_ADMISSIONS_SESSION_TIMEOUT's default, and
// MinSessionTimeout its least: Kafka's own group.min.session.timeout.ms.
const (
	defaultSessionTimeout = 10 * time.Second
	minSessionTimeout     = 6 * time.Second
)

// ReadConfig reads the admissions log's settings; eventBrokers (KAFKA_BROKERS)
// are its brokers unless KAFKA_ADMISSIONS_BROKERS names others.
func ReadConfig(e *envconf.Reader, eventBrokers []string) (Config, error) {
	c := Config{
		Brokers: split(e.String("KAFKA_ADMISSIONS_BROKERS", "",
			"comma-separated host:port seed brokers of the admissions log (writePath log vouchers); unset: KAFKA_BROKERS; neither: log vouchers answer 503")),
		Topic: e.String("KAFKA_ADMISSIONS_TOPIC", DefaultTopic,
			"the topic of writePath log admissions, keyed by voucher code (create it first, with "+DeadLetterTopic("<topic>")+" beside it)"),
		Group: e.String("KAFKA_ADMISSIONS_GROUP", DefaultGroup,
			"the consumer group in which the ledgers write the admissions log to Postgres"),
		SessionTimeout: e.DurationMin("KAFKA_ADMISSIONS_SESSION_TIMEOUT", defaultSessionTimeout, minSessionTimeout,
			"how long the admissions group waits for a ledger that stopped heartbeating (a crash) before its partitions go to the other members; until then their admissions stay unwritten"),
	}
	if err := e.Err(); err != nil {
		return c, err
	}
	if len(c.Brokers) == 0 {
		c.Brokers = eventBrokers
	}
	for _, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return c, fmt.Errorf("KAFKA_ADMISSIONS_BROKERS must be host:port pairs separated by commas, not %q", b)
		}
	}
	if c.Topic == "" || c.Group == "" {
		return c, fmt.Errorf("KAFKA_ADMISSIONS_TOPIC and KAFKA_ADMISSIONS_GROUP must not be empty")
	}
	return c, nil
}

// On reports whether the ledger has an admissions log.
func (c Config) On() bool { return len(c.Brokers) > 0 }

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
