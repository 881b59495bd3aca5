package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/events"
)

// kafkaDeliveryTimeout bounds one batch: a cluster that does not take it by
// then gets the batch again after a pause (the lag metric shows the wait).
const kafkaDeliveryTimeout = 30 * time.Second

// Kafka produces each event as one record of a topic, keyed by voucher code:
// Kafka keeps a partition's order and a key always lands in one partition, so
// a voucher's events stay in id order. The producer is idempotent (franz-go's
// default) with acks from every in-sync replica, so a retry inside the client
// never duplicates or reorders; a batch the dispatcher sends again may
// duplicate (consumers deduplicate by id). Nothing is parked: an unreachable
// cluster delays the events, it never drops them.
type Kafka struct {
	client *kgo.Client
	topic  string
	name   string
	m      *Metrics
}

// NewKafka returns the sink of topic on the cluster reached through brokers
// (host:port seeds). It connects on first use.
func NewKafka(brokers []string, topic string, m *Metrics) (*Kafka, error) {
	if m == nil {
		m = NewMetrics(nil)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotence needs it, and it is franz-go's default too
		kgo.RecordDeliveryTimeout(kafkaDeliveryTimeout),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &Kafka{client: cl, topic: topic, name: sinkName("kafka", topic), m: m}, nil
}

// Name implements Sink.
func (k *Kafka) Name() string { return k.name }

// Close flushes nothing (every Deliver waited for its acks) and disconnects.
func (k *Kafka) Close() { k.client.Close() }

// Deliver implements Sink: the whole batch, acknowledged, or an error.
func (k *Kafka) Deliver(ctx context.Context, _ <-chan struct{}, evs []events.Event) ([]store.Parked, error) {
	recs := make([]*kgo.Record, len(evs))
	for i, e := range evs {
		value, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", e.ID, err)
		}
		recs[i] = &kgo.Record{
			Key: []byte(e.VoucherCode), Value: value, Timestamp: e.OccurredAt,
			Headers: []kgo.RecordHeader{
				{Key: "type", Value: []byte(e.Type)},
				{Key: "id", Value: []byte(strconv.FormatInt(e.ID, 10))},
			},
		}
	}
	if err := k.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		k.m.eventErrors.WithLabelValues(k.name).Inc()
		return nil, fmt.Errorf("produce %d events to %s: %w", len(recs), k.topic, err)
	}
	return nil, nil
}
