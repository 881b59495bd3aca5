package admissions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Writer writes a batch of admissions of one or several vouchers in one
// transaction (sale.Ledger), and gives back the uses of those the database
// rejected outright.
type Writer interface {
	WriteLogged(ctx context.Context, batch []sale.Batch) ([]sale.Refusal, error)
	GiveBackLogged(ctx context.Context, code string, orderIDs []string) error
}

// FailedStore keeps the refused admissions for the operator
// (GET /admin/admissions/failed).
type FailedStore interface {
	InsertFailedAdmissions(ctx context.Context, fs []store.FailedAdmission) error
}

// ConsumerConfig is what a Consumer needs besides its dependencies.
type ConsumerConfig struct {
	Brokers  []string
	Topic    string
	Group    string
	MaxPoll  int           // most records taken per poll (WRITE_MAX_BATCH)
	Backoff  time.Duration // pause after a batch the database could not decide
	Clock    func() time.Time
	Metrics  *Metrics
	ClientID string // optional: names this ledger in the group
	// SessionTimeout: a member silent this long (a crashed ledger) loses its
	// partitions to the others (KAFKA_ADMISSIONS_SESSION_TIMEOUT); 0:
	// DefaultSessionTimeout.
	SessionTimeout time.Duration
}

// Consumer is a member of the admissions consumer group: it writes each
// polled partition's admissions in one transaction (a group commit of each
// of the partition's vouchers, their rows locked in code order), and commits
// the partition's offsets only after that transaction committed and every
// refused record was dead-lettered. A crash in between
// redelivers records whose rows exist: the group commit finds them and
// writes nothing (at least once in, exactly once in effect).
type Consumer struct {
	opts   []kgo.Opt
	client *kgo.Client // from Run on
	w      Writer
	failed FailedStore
	cfg    ConsumerConfig
	log    *slog.Logger
}

// NewConsumer returns a consumer that joins cfg.Group once Run starts (a
// member that joined but did not poll would hold partitions unread).
func NewConsumer(cfg ConsumerConfig, w Writer, failed FailedStore, log *slog.Logger) (*Consumer, error) {
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 200 * time.Millisecond
	}
	if cfg.MaxPoll <= 0 {
		cfg.MaxPoll = 256
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = defaultSessionTimeout
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// A killed ledger's partitions wait for its session to end: franz-go's
		// default, 45 s, left a sale's admissions unwritten that long.
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(min(3*time.Second, cfg.SessionTimeout/3)),
		// A group with no committed offset starts at the first admission:
		// starting at the end would lose every record produced before it.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DefaultProduceTopic(DeadLetterTopic(cfg.Topic)),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	}
	if cfg.ClientID != "" {
		opts = append(opts, kgo.ClientID(cfg.ClientID))
	}
	return &Consumer{opts: opts, w: w, failed: failed, cfg: cfg, log: log}, nil
}

// Run joins the group and consumes until ctx is done, then leaves the group.
// A batch in progress when ctx ends is abandoned uncommitted: it is
// redelivered to whichever member takes its partition. Run once.
func (c *Consumer) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(c.opts...)
	if err != nil {
		return fmt.Errorf("kafka admissions consumer: %w", err)
	}
	c.client = cl
	defer func() {
		// A poll blocks rebalances until AllowRebalance: leaving the group
		// (Close) would wait for it forever.
		c.client.AllowRebalance()
		c.client.Close()
	}()
	for {
		fetches := c.client.PollRecords(ctx, c.cfg.MaxPoll)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			c.log.Warn("admissions fetch failed", "topic", topic, "partition", p, "err", err)
		})
		var mu sync.Mutex
		var done []*kgo.Record
		var wg sync.WaitGroup
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if !c.writePartition(ctx, p) {
					return
				}
				mu.Lock()
				done = append(done, p.Records[len(p.Records)-1])
				mu.Unlock()
			}()
		})
		wg.Wait()
		if len(done) > 0 {
			if err := c.client.CommitRecords(ctx, done...); err != nil && ctx.Err() == nil {
				// The rows are committed: a redelivery finds them.
				c.log.Warn("admissions offsets not committed", "err", err)
			}
		}
		c.client.AllowRebalance()
	}
}

// writePartition writes one partition's polled records, again and again
// while the database cannot decide, until they are all written or
// dead-lettered (true) or ctx ends (false: nothing may be committed).
func (c *Consumer) writePartition(ctx context.Context, p kgo.FetchTopicPartition) bool {
	for {
		err := c.writeRecords(ctx, p.Records)
		if err == nil {
			break
		}
		c.cfg.Metrics.faults.Inc()
		c.log.Warn("admissions batch not written: trying again", "partition", p.Partition,
			"records", len(p.Records), "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(c.cfg.Backoff):
		}
	}
	c.cfg.Metrics.written.Add(float64(len(p.Records)))
	return true
}

// writeRecords writes records of one partition in one transaction (each
// voucher's admissions a group commit in it), then the refused ones to the
// dead-letter topic and the failed list. An error leaves the batch to be
// written again whole.
//
// One transaction per partition batch, not one per voucher: a partition
// holds many vouchers (the key is the voucher code), and with a commit per
// voucher a backlog of 100 vouchers' 3,000 admissions in one partition took
// 1,200 transactions, against 12 now, and three to four times as long on a Postgres
// with fsync on (BenchmarkLogPathDrain, loadtest/BENCHMARKS.md).
func (c *Consumer) writeRecords(ctx context.Context, recs []*kgo.Record) error {
	var batch []sale.Batch
	var recsOf [][]*kgo.Record // batch[i]'s records, claim by claim
	at := map[string]int{}     // voucher code (and whether promised) -> its index in batch
	var failed []store.FailedAdmission
	var dead []*kgo.Record
	for _, r := range recs {
		a, err := decode(r)
		if err != nil {
			code := string(r.Key)
			if !voucher.ValidCode(code) {
				code = ReasonUnreadable // the record's own key is in the dead-letter topic
			}
			failed = append(failed, store.FailedAdmission{Code: code, OrderID: fmt.Sprintf("p%d:%d", r.Partition, r.Offset),
				Reason: ReasonUnreadable, Message: err.Error(), Partition: r.Partition, Offset: r.Offset, AdmittedAt: r.Timestamp})
			dead = append(dead, deadLetter(r, ReasonUnreadable, err))
			continue
		}
		// A voucher's promised records and its older ones (decided at
		// consume time) are two batches.
		promised, ok := a.Promised()
		key := a.Code
		if ok {
			key += "\x00promised"
		}
		i, seen := at[key]
		if !seen {
			i = len(batch)
			at[key] = i
			batch, recsOf = append(batch, sale.Batch{Code: a.Code}), append(recsOf, nil)
		}
		batch[i].Claims, recsOf[i] = append(batch[i].Claims, a.Claim()), append(recsOf[i], r)
		if ok {
			batch[i].Promised = append(batch[i].Promised, promised)
		}
	}
	if len(batch) > 0 {
		refused, err := c.w.WriteLogged(ctx, batch)
		if _, ok := store.Rejected(err); ok {
			refused, err = c.writeAlone(ctx, batch)
		}
		if err != nil {
			return err
		}
		for _, rf := range refused {
			i := rf.Batch
			r := recordOf(recsOf[i], batch[i].Claims, rf.Claim.OrderID)
			failed = append(failed, store.FailedAdmission{Code: rf.Code, OrderID: rf.Claim.OrderID, CustomerID: rf.Claim.CustomerID,
				OrderAmount: rf.Claim.OrderAmount, Reason: rf.Reason, Message: messageOf(rf.Err),
				Partition: r.Partition, Offset: r.Offset, AdmittedAt: r.Timestamp})
			dead = append(dead, deadLetter(r, rf.Reason, rf.Err))
		}
	}
	if len(dead) == 0 {
		return nil
	}
	if err := c.client.ProduceSync(ctx, dead...).FirstErr(); err != nil {
		return fmt.Errorf("dead-letter %d admissions: %w", len(dead), err)
	}
	if err := c.failed.InsertFailedAdmissions(ctx, failed); err != nil {
		return err
	}
	c.cfg.Metrics.DeadLetter.Add(float64(len(dead)))
	for _, f := range failed {
		c.log.Error("admission refused by the database: dead-lettered, its use given back",
			"code", f.Code, "order", f.OrderID, "reason", f.Reason, "partition", f.Partition, "offset", f.Offset)
	}
	return nil
}

// ReasonUnreadable is the reason of a record that is not an admission.
const ReasonUnreadable = "UNREADABLE"

// recordOf is the record of orderID among a group's records.
func recordOf(recs []*kgo.Record, claims []voucher.Claim, orderID string) *kgo.Record {
	for i, cl := range claims {
		if cl.OrderID == orderID {
			return recs[i]
		}
	}
	return recs[0]
}

// messageOf is what an operator reads of a refusal: the domain error's
// message, never a driver's details.
func messageOf(err error) string {
	var e *voucher.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "refused"
}

// deadLetter is r as the dead-letter topic keeps it: the same key and value,
// with the reason and where it came from in headers.
func deadLetter(r *kgo.Record, reason string, err error) *kgo.Record {
	return &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: []kgo.RecordHeader{
		{Key: "reason", Value: []byte(reason)},
		{Key: "message", Value: []byte(messageOf(err))},
		{Key: "source", Value: []byte(fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset))},
	}}
}
