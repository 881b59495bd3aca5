package gate

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/voucher"
)

// ChangesChannel is the Redis channel on which the ledger names a voucher whose
// terms or stock changed (an admin change, a pause, uses given back), so every
// proxy and ledger drops what it cached about it at once instead of after its
// TTLs. Each message is one voucher code.
const ChangesChannel = "flashgate:voucher-changes"

// Publisher is the Publish method of a redis.UniversalClient.
type Publisher interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
}

// Subscriber is the Subscribe method of a redis.UniversalClient.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// PublishChange names code on ChangesChannel. Delivery is at most once: a
// subscriber that was disconnected misses it and falls back to its TTLs.
func PublishChange(ctx context.Context, p Publisher, code string) error {
	if err := checkCode(code); err != nil {
		return err
	}
	if err := p.Publish(ctx, ChangesChannel, code).Err(); err != nil {
		return fmt.Errorf("publish change of %s: %w", code, err)
	}
	return nil
}

// watchHealthCheck is how often a quiet subscription is pinged: a connection
// that died without a close (a partition) is replaced within about twice this.
const watchHealthCheck = 3 * time.Second

// WatchChanges subscribes to ChangesChannel and calls onChange with each valid
// code, one at a time, until ctx ends. go-redis resubscribes by itself after a
// lost connection (and pings a quiet one to notice); messages published
// meanwhile are lost, which the subscriber's TTLs cover. A message that is not
// a voucher code is logged and skipped.
func WatchChanges(ctx context.Context, s Subscriber, onChange func(code string), log *slog.Logger) {
	ps := s.Subscribe(ctx, ChangesChannel)
	defer func() { _ = ps.Close() }()
	msgs := ps.Channel(redis.WithChannelHealthCheckInterval(watchHealthCheck))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return // the subscription was closed under us
			}
			if !voucher.ValidCode(m.Payload) {
				log.Warn("voucher change with an invalid code", "channel", m.Channel, "payload", m.Payload)
				continue
			}
			onChange(m.Payload)
		}
	}
}
