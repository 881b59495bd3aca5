package stack

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
)

// admissionsTopic is the ledger's default KAFKA_ADMISSIONS_TOPIC; its
// dead-letter topic is beside it with ".dlt". The ledger creates neither
// (ledger/internal/admissions, which the load tests cannot import).
const admissionsTopic = "flashgate.admissions"

// startKafka starts franz-go's in-process Kafka (kfake) with the admissions
// topics: one broker in this process's memory, so an acknowledged admission
// survives the ledger, not this process. It stands in for the cluster a
// writePath log voucher needs; its own CPU is this process's.
func startKafka() (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, admissionsTopic, admissionsTopic+".dlt"))
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	return c, nil
}
