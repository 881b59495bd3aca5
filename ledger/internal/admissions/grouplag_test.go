package admissions

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// manualClock is a clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestGroupLagMeasure: on franz-go's in-process Kafka, the lag is unknown
// before a measurement, zero-ish on an empty topic, grows from the last
// snapshot the group's committed offsets reached while records wait, falls
// once the group commits them, covers the oldest produce in flight, and
// goes on growing (known) while the broker does not answer.
func TestGroupLagMeasure(t *testing.T) {
	ctx := t.Context()
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "adm"))
	require.NoError(t, err)
	defer k.Close()
	clock := &manualClock{now: time.Unix(1_000, 0)}
	g, err := NewGroupLag(k.ListenAddrs(), "adm", "grp", clock.Now, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer g.Close()
	lagIs := func(want time.Duration, what string) {
		t.Helper()
		lag, known := g.Lag()
		require.True(t, known, what)
		assert.Equal(t, want, lag, what)
	}

	_, known := g.Lag()
	assert.False(t, known, "before any measurement")
	require.NoError(t, g.Measure(ctx))
	lagIs(0, "an empty topic, just measured")

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.DefaultProduceTopic("adm"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	for range 3 {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte("x")}).FirstErr())
	}
	clock.Add(time.Second)
	require.NoError(t, g.Measure(ctx)) // ends 3 on partition 1: not committed
	clock.Add(4 * time.Second)
	require.NoError(t, g.Measure(ctx))
	lagIs(5*time.Second, "three records not committed: since the last snapshot before them")

	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "adm", Partition: 1, At: 3, LeaderEpoch: -1})
	committed, err := kadm.NewClient(cl).CommitOffsets(ctx, "grp", os)
	require.NoError(t, err)
	require.NoError(t, committed.Error())
	clock.Add(time.Second)
	require.NoError(t, g.Measure(ctx))
	lagIs(0, "committed: consumed through the newest snapshot")

	g.Covering(func() (time.Time, bool) { return clock.Now().Add(-3 * time.Second), true })
	lagIs(3*time.Second, "a produce in flight for 3 s")
	g.inflight = nil

	k.Close()
	clock.Add(2 * time.Second)
	down, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	require.Error(t, g.Measure(down))
	lagIs(2*time.Second, "the broker does not answer: the lag grows from the last proof")
}
