// Package admissions is the article's Approach B for vouchers whose
// writePath is log: the admissions the Redis gate took are produced to a
// Kafka topic keyed by voucher code (Producer), and a consumer group writes
// them to Postgres in batches, idempotently by orderId, committing offsets
// only once their transaction committed (Consumer). A record the database
// refuses goes to the dead-letter topic (<topic>.dlt) and its Redis use is
// given back.
package admissions

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/voucher"
)

// DefaultTopic and DefaultGroup are KAFKA_ADMISSIONS_TOPIC's and
// KAFKA_ADMISSIONS_GROUP's defaults.
const (
	DefaultTopic = "flashgate.admissions"
	DefaultGroup = "flashgate-ledger"
)

// DeadLetterTopic is the topic refused admissions of topic go to.
func DeadLetterTopic(topic string) string { return topic + ".dlt" }

// Admission is one record of the admissions topic: a use the gate took for
// an order, not yet written, with everything its 201 promised. The record is
// the decision: the consumer writes DiscountAmount and ExpiresAt as they are,
// whatever the voucher's terms are by then. A record without them (produced
// before they existed) is written with the terms at consume time, as it
// always was.
type Admission struct {
	Code           string     `json:"code"`
	CustomerID     int64      `json:"customerId"`
	OrderID        string     `json:"orderId"`
	OrderAmount    int64      `json:"orderAmount"`
	AdmittedAt     time.Time  `json:"admittedAt"`
	DiscountAmount *int64     `json:"discountAmount,omitempty"`
	ExpiresAt      *time.Time `json:"expiresAt,omitempty"`
}

// admissionOf is the record of a promised admission l of voucher code.
func admissionOf(code string, l store.Logged) Admission {
	d, e := l.DiscountAmount, l.ExpiresAt.UTC()
	return Admission{Code: code, CustomerID: l.Claim.CustomerID, OrderID: l.Claim.OrderID,
		OrderAmount: l.Claim.OrderAmount, AdmittedAt: l.AdmittedAt.UTC(), DiscountAmount: &d, ExpiresAt: &e}
}

// Promised is a as the consumer writes it when it carries its promise
// (ok false: an older record, decided at consume time).
func (a Admission) Promised() (store.Logged, bool) {
	if a.DiscountAmount == nil || a.ExpiresAt == nil {
		return store.Logged{}, false
	}
	return store.Logged{Claim: a.Claim(), DiscountAmount: *a.DiscountAmount, AdmittedAt: a.AdmittedAt,
		ExpiresAt: *a.ExpiresAt}, true
}

// Claim is the admission as the group commit writes it.
func (a Admission) Claim() voucher.Claim {
	return voucher.Claim{CustomerID: a.CustomerID, OrderID: a.OrderID, OrderAmount: a.OrderAmount}
}

// record is a's Kafka record on topic, keyed by its voucher code so that a
// voucher's admissions stay in one partition, in order.
func (a Admission) record(topic string) (*kgo.Record, error) {
	value, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("admission %s/%s: %w", a.Code, a.OrderID, err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(a.Code), Value: value, Timestamp: a.AdmittedAt}, nil
}

// decode reads one record of the admissions topic. A record that does not
// decode (never written by a ledger) is reported, not retried.
func decode(r *kgo.Record) (Admission, error) {
	var a Admission
	if err := json.Unmarshal(r.Value, &a); err != nil {
		return Admission{}, fmt.Errorf("admission at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if a.Code != string(r.Key) || !voucher.ValidCode(a.Code) || !voucher.ValidOrderID(a.OrderID) || a.CustomerID <= 0 {
		return Admission{}, fmt.Errorf("admission at %s/%d@%d: key %q, code %q, order %q, customer %d is not an admission",
			r.Topic, r.Partition, r.Offset, r.Key, a.Code, a.OrderID, a.CustomerID)
	}
	return a, nil
}
