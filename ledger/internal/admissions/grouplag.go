package admissions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// GroupLag measures how far behind the admissions consumer group is, from
// the broker: the end offsets of every partition of the topic against the
// offsets the group committed, whoever its members are. It is what the
// reconciler and the settler trust before they free a log voucher's hold
// with no row, so it never speaks for one member only: a stuck member, an
// error-only poll or a partition assigned and not yet polled all leave the
// group's committed offsets behind, and a revoked partition is simply the
// next owner's.
//
// Each measurement keeps a snapshot (when, the end offsets of every
// partition). The newest snapshot whose end offsets the group's committed
// offsets all reach is the time the group has consumed through: every record
// acknowledged before it was written (or dead-lettered) and committed. The
// lag is the time since, and at least the age of the oldest produce still
// in flight in this ledger (Covering): such a record may land behind the
// snapshot's end offsets.
type GroupLag struct {
	adm     *kadm.Client
	topic   string
	group   string
	clock   func() time.Time
	metrics *Metrics
	log     *slog.Logger

	mu       sync.Mutex
	inflight []func() (time.Time, bool) // the oldest produce in flight of each producer covered
	snaps    []snapshot                 // measured, oldest first, newer than through
	through  map[int32]time.Time        // per partition: the newest snapshot its committed offset reached
	behind   map[int32]int64            // per partition: records not committed at the last measurement
	started  time.Time                  // the first measurement that answered
}

// snapshot is the end offsets of every partition of the topic at a time.
type snapshot struct {
	at   time.Time
	ends map[int32]int64
}

// maxSnapshots bounds the snapshots kept while the group is behind; past it
// the oldest are dropped, which can only make the lag read longer.
const maxSnapshots = 1024

// LagInterval is how often GroupLag.Run measures.
const LagInterval = time.Second

// NewGroupLag returns a measure of group's lag on topic, through its own
// client of brokers (it joins no group).
func NewGroupLag(brokers []string, topic, group string, clock func() time.Time, m *Metrics, log *slog.Logger) (*GroupLag, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("kafka admissions lag client: %w", err)
	}
	if clock == nil {
		clock = time.Now
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &GroupLag{adm: kadm.NewClient(cl), topic: topic, group: group, clock: clock, metrics: m, log: log,
		through: map[int32]time.Time{}, behind: map[int32]int64{}}, nil
}

// Close disconnects.
func (g *GroupLag) Close() { g.adm.Close() }

// Covering makes the lag cover the produces in flight that oldest reports
// (the time the oldest started, false when none is): a record not yet
// acknowledged is behind every snapshot.
func (g *GroupLag) Covering(oldest func() (time.Time, bool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight = append(g.inflight, oldest)
}

// Run measures every interval (LagInterval when 0) until ctx ends.
func (g *GroupLag) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = LagInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		err := g.Measure(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !failing:
			g.log.Warn("admissions group lag not measured: it grows until the broker answers", "err", err)
		case err == nil && failing:
			g.log.Info("admissions group lag measured again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Measure asks the broker once for the topic's end offsets and the group's
// committed offsets, and moves the consumed-through time forward by what
// they prove. A failure proves nothing: the lag goes on growing.
func (g *GroupLag) Measure(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	at := g.clock()
	ends, err := g.offsets(ctx, g.adm.ListEndOffsets)
	if err == nil {
		var starts map[int32]int64
		starts, err = g.offsets(ctx, g.adm.ListStartOffsets)
		if err == nil {
			err = g.record(ctx, at, ends, starts)
		}
	}
	if err != nil {
		g.metrics.lagFailures.Inc()
		g.publish()
		return err
	}
	g.publish()
	return nil
}

// offsets lists the topic's offsets with list (start or end), by partition.
func (g *GroupLag) offsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, error) {
	listed, err := list(ctx, g.topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list the offsets of %s: %w", g.topic, err)
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	if len(out) == 0 {
		return nil, fmt.Errorf("list the offsets of %s: no partition", g.topic)
	}
	return out, nil
}

// record adds the snapshot (at, ends) and moves each partition's
// consumed-through time to the newest snapshot the group's committed offset
// reaches (or whose records were all deleted: ends at or before starts).
func (g *GroupLag) record(ctx context.Context, at time.Time, ends, starts map[int32]int64) error {
	committed, err := g.adm.FetchOffsets(ctx, g.group)
	if err == nil {
		err = committed.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		// A group that never committed (some brokers answer so): nothing
		// consumed, which only empty partitions can prove.
		committed, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return fmt.Errorf("fetch the offsets of group %s: %w", g.group, err)
	}
	reached := func(p int32, end int64) bool {
		if end <= starts[p] {
			return true
		}
		o, ok := committed.Lookup(g.topic, p)
		return ok && o.At >= end
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started.IsZero() {
		g.started = at
	}
	g.snaps = append(g.snaps, snapshot{at: at, ends: ends})
	if len(g.snaps) > maxSnapshots {
		g.snaps = g.snaps[len(g.snaps)-maxSnapshots:]
	}
	for _, s := range g.snaps {
		for p, end := range s.ends {
			if reached(p, end) && s.at.After(g.through[p]) {
				g.through[p] = s.at
			}
		}
	}
	for p := range g.through {
		if _, ok := ends[p]; !ok {
			delete(g.through, p) // the topic has it no more
		}
	}
	for p := range ends {
		o, ok := committed.Lookup(g.topic, p)
		next := starts[p]
		if ok && o.At > next {
			next = o.At
		}
		g.behind[p] = max(ends[p]-next, 0)
	}
	g.prune(ends)
	return nil
}

// prune drops the snapshots every partition's consumed-through time has
// passed: they can prove nothing more. Called with mu held.
func (g *GroupLag) prune(ends map[int32]int64) {
	oldest, ok := g.consumedThrough(ends)
	if !ok {
		return
	}
	i := 0
	for i < len(g.snaps)-1 && !g.snaps[i].at.After(oldest) {
		i++
	}
	g.snaps = g.snaps[i:]
}

// consumedThrough is the time before which every record of every partition
// of ends was consumed; false while one partition has not been proven once.
// Called with mu held.
func (g *GroupLag) consumedThrough(ends map[int32]int64) (time.Time, bool) {
	var oldest time.Time
	for p := range ends {
		t, ok := g.through[p]
		if !ok {
			return time.Time{}, false
		}
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest, !oldest.IsZero()
}

// Lag is the group's lag: every admission acknowledged more than lag ago
// was written by the group (or dead-lettered) and its offset committed, and
// no produce of this ledger has been in flight longer. known is false until
// a measurement proved a time for every partition: then nothing may be
// taken as consumed. While the broker does not answer, the lag grows with
// the time since the last proof.
func (g *GroupLag) Lag() (lag time.Duration, known bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lagLocked()
}

func (g *GroupLag) lagLocked() (time.Duration, bool) {
	if len(g.snaps) == 0 {
		return 0, false
	}
	through, ok := g.consumedThrough(g.snaps[len(g.snaps)-1].ends)
	if !ok {
		return 0, false
	}
	now := g.clock()
	lag := max(now.Sub(through), 0)
	for _, oldest := range g.inflight {
		if t, ok := oldest(); ok {
			lag = max(lag, now.Sub(t))
		}
	}
	return lag, true
}

// publish sets the lag's gauges: the group's, and each partition's time
// since its consumed-through time (since the first measurement while none
// was proven).
func (g *GroupLag) publish() {
	g.mu.Lock()
	defer g.mu.Unlock()
	lag, known := g.lagLocked()
	if known {
		g.metrics.groupLag.Set(lag.Seconds())
	} else {
		g.metrics.groupLag.Set(-1)
	}
	if len(g.snaps) == 0 {
		return
	}
	now := g.clock()
	latest := g.snaps[len(g.snaps)-1]
	for p := range latest.ends {
		secs := 0.0
		if t, ok := g.through[p]; !ok {
			secs = now.Sub(g.started).Seconds()
		} else if t.Before(latest.at) {
			secs = now.Sub(t).Seconds()
		}
		g.metrics.ObserveLag(p, g.behind[p], secs)
	}
}
