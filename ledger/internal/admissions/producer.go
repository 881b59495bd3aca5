package admissions

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashgate/flashgate/ledger/internal/store"
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

// Append produces one admission per promised claim of voucher code (what
// its 201 says) and returns, once the broker acknowledged or refused each,
// nil or the error of each.
func (p *Producer) Append(ctx context.Context, code string, promised []store.Logged) []error {
	defer p.flying.start(p.clock())()
	errs := make([]error, len(promised))
	recs := make([]*kgo.Record, 0, len(promised))
	at := make(map[*kgo.Record]int, len(promised)) // the results come in the order the broker answered
	now := p.clock()
	for i, l := range promised {
		rec, err := admissionOf(code, l).record(p.topic)
		if err != nil {
			errs[i] = err
			continue
		}
		// Stamped when produced, not admitted: franz-go times a record's
		// delivery from its timestamp, and a record produced again for an
		// old promise (sale.promiseStale) would time out at once.
		rec.Timestamp = now
		recs, at[rec] = append(recs, rec), i
	}
	for _, r := range p.client.ProduceSync(ctx, recs...) {
		if r.Err != nil {
			i := at[r.Record]
			errs[i] = fmt.Errorf("produce admission %s/%s to %s: %w", code, promised[i].Claim.OrderID, p.topic, r.Err)
		}
	}
	return errs
}
