package admissions

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Producer appends admissions to the admissions topic. Its client is
// idempotent (franz-go's default) with acks from every in-sync replica, and
// never lingers: a request is answered once the broker acknowledged its
// record, and a batch of a proxy's claims goes out together.
//
// A produce is failed only when failing it is safe: franz-go never fails an
// idempotent record that was sent and not yet answered (the broker may have
// written it), it waits for the answer. So an error means the record is not
// in the log, and the caller may give its use back; it also means a request
// can outlast its own deadline while a broker holds its record unanswered.
type Producer struct {
	client *kgo.Client
	topic  string
	clock  func() time.Time
	flying inFlight
}

// produceTimeout bounds a record that never left the client (no broker
// reachable): it is failed, and its use given back, after this long.
const produceTimeout = 5 * time.Second

// NewProducer returns a producer of topic on the cluster reached through
// brokers (host:port seeds). It connects on first use.
func NewProducer(brokers []string, topic string, clock func() time.Time) (*Producer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordDeliveryTimeout(produceTimeout),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka admissions client: %w", err)
	}
	return &Producer{client: cl, topic: topic, clock: clock}, nil
}

// Close disconnects; every Append waited for its acknowledgements.
func (p *Producer) Close() { p.client.Close() }

// InFlight is when the oldest Append still waiting for the broker started
// (false: none waits): GroupLag.Covering takes it.
func (p *Producer) InFlight() (time.Time, bool) { return p.flying.oldest() }

// Append produces one admission per claim of voucher code and returns, once
// the broker acknowledged or refused each, nil or the error of each claim.
func (p *Producer) Append(ctx context.Context, code string, claims []voucher.Claim) []error {
	defer p.flying.start(p.clock())()
	errs := make([]error, len(claims))
	recs := make([]*kgo.Record, 0, len(claims))
	at := make(map[*kgo.Record]int, len(claims)) // the results come in the order the broker answered
	now := p.clock().UTC()
	for i, cl := range claims {
		rec, err := Admission{Code: code, CustomerID: cl.CustomerID, OrderID: cl.OrderID,
			OrderAmount: cl.OrderAmount, AdmittedAt: now}.record(p.topic)
		if err != nil {
			errs[i] = err
			continue
		}
		recs, at[rec] = append(recs, rec), i
	}
	for _, r := range p.client.ProduceSync(ctx, recs...) {
		if r.Err != nil {
			i := at[r.Record]
			errs[i] = fmt.Errorf("produce admission %s/%s to %s: %w", code, claims[i].OrderID, p.topic, r.Err)
		}
	}
	return errs
}
