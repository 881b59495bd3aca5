package stack

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// admissionsTopic is the ledger's default KAFKA_ADMISSIONS_TOPIC; its
// dead-letter topic is beside it with ".dlt". The ledger creates neither
// (ledger/internal/admissions, which the load tests cannot import).
const admissionsTopic = "flashgate.admissions"

// AdmissionsTopic and DeadLetterTopic name the topics of the stack's Kafka.
const (
	AdmissionsTopic = admissionsTopic
	DeadLetterTopic = admissionsTopic + ".dlt"
)

// startKafka starts franz-go's in-process Kafka (kfake) with the admissions
// topics: one broker in this process, so an acknowledged admission survives
// the ledger, and with dir (made for it, removed by Stop) its log on disk,
// every produce synced before its ack, so that RestartKafka brings back every
// acknowledged record. It stands in for the cluster a writePath log voucher
// needs; its own CPU is this process's.
func (s *Stack) startKafka(dir bool) error {
	s.kafkaOpts = []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(4, admissionsTopic, admissionsTopic+".dlt")}
	if dir {
		d, err := os.MkdirTemp("", "flashgate-kafka-*")
		if err != nil {
			return fmt.Errorf("kfake's data directory: %w", err)
		}
		s.kafkaDir = d
		s.kafkaOpts = append(s.kafkaOpts, kfake.DataDir(d), kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(s.kafkaOpts...)
	if err != nil {
		return fmt.Errorf("start kfake: %w", err)
	}
	s.Kafka = c
	_, port, err := net.SplitHostPort(c.ListenAddrs()[0])
	if err != nil {
		return fmt.Errorf("kfake's address: %w", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("kfake's port: %w", err)
	}
	s.kafkaOpts = append(s.kafkaOpts, kfake.Ports(p)) // a restart listens where the ledger looks
	return nil
}

// RestartKafka stops the stack's broker (its connections cut, requests in
// flight unanswered), keeps it down for down and starts it again on the same
// port from its files: every acknowledged record, the producers' sequence
// numbers and the groups' committed offsets come back. It needs
// Options.AdmissionsLogOnDisk. It returns how long the broker was gone.
func (s *Stack) RestartKafka(down time.Duration) (time.Duration, error) {
	if s.Kafka == nil || s.kafkaDir == "" {
		return 0, errors.New("restart kfake: the stack's Kafka keeps its log in memory (Options.AdmissionsLogOnDisk)")
	}
	start := time.Now()
	s.Kafka.Close()
	time.Sleep(down)
	c, err := kfake.NewCluster(s.kafkaOpts...)
	if err != nil {
		return 0, fmt.Errorf("start kfake again: %w", err)
	}
	s.Kafka = c
	return time.Since(start), nil
}

// KafkaRecords is how many records topic holds in the stack's Kafka, over
// its partitions; an error when there is no such topic.
func (s *Stack) KafkaRecords(topic string) (int64, error) {
	if s.Kafka == nil {
		return 0, errors.New("the stack has no Kafka")
	}
	infos := s.Kafka.PartitionInfos(topic)
	if len(infos) == 0 {
		return 0, fmt.Errorf("kfake has no topic %s", topic)
	}
	var n int64
	for _, p := range infos {
		n += p.HighWatermark - p.LogStartOffset
	}
	return n, nil
}
