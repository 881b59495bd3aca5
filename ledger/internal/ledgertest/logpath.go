package ledgertest

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/flashgate/flashgate/ledger/internal/admissions"
	"github.com/flashgate/flashgate/ledger/internal/store"
)

// FailedPage reads GET /admin/admissions/failed (all: the resolved too).
func (l *Ledger) FailedPage(tb testing.TB, all bool) []store.FailedAdmission {
	tb.Helper()
	path := "/admin/admissions/failed"
	if all {
		path += "?all=true"
	}
	r := l.Call(tb, http.MethodGet, path, nil)
	require.Equal(tb, http.StatusOK, r.Status, r.Raw)
	var page struct {
		Admissions []store.FailedAdmission `json:"admissions"`
	}
	require.NoError(tb, json.Unmarshal([]byte(r.Raw), &page))
	return page.Admissions
}

// FailedOf is the failed admissions of voucher code among fs.
func FailedOf(fs []store.FailedAdmission, code string) []store.FailedAdmission {
	var mine []store.FailedAdmission
	for _, f := range fs {
		if f.Code == code {
			mine = append(mine, f)
		}
	}
	return mine
}

// NewKafka starts franz-go's in-process Kafka with the admissions topic and
// its dead-letter topic, partitions partitions each.
func NewKafka(tb testing.TB, partitions int32) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, admissions.DefaultTopic, admissions.DeadLetterTopic(admissions.DefaultTopic)))
	require.NoError(tb, err)
	tb.Cleanup(c.Close)
	return c
}

// Consume runs a member of l's admissions consumer group until the returned
// func stops it (and waits for it), or the test ends.
func (l *Ledger) Consume(tb testing.TB) (stop func()) {
	tb.Helper()
	c, err := l.Svc.NewConsumer()
	require.NoError(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); assert.NoError(tb, c.Run(ctx)) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	tb.Cleanup(stop)
	return stop
}

// WaitUsed waits until code's used_count reaches want (the consumer caught up).
func (l *Ledger) WaitUsed(tb testing.TB, code string, want int) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := l.Counts(tb, code).Used
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			require.Equal(tb, want, got, "used_count of %s once the consumer caught up", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PathSpec is a create body with a write path.
type PathSpec struct {
	VoucherSpec
	WritePath string `json:"writePath,omitempty"`
}
