package load

import (
	"context"
	"math"
	"slices"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// schedulePacer sends hit i at at[i] from the start, and stops after the last.
type schedulePacer struct{ at []time.Duration }

func (p schedulePacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= uint64(len(p.at)) {
		return 0, true
	}
	return max(p.at[hits]-elapsed, 0), false
}

// Rate is the schedule's mean rate over the second before elapsed.
func (p schedulePacer) Rate(elapsed time.Duration) float64 {
	lo, _ := slices.BinarySearch(p.at, elapsed-time.Second)
	hi, _ := slices.BinarySearch(p.at, elapsed)
	return float64(hi - lo)
}

var _ vegeta.Pacer = schedulePacer{}

// countedPacer paces like ConstantPacer and stops after n hits, so a burst
// sends exactly its plan.
type countedPacer struct {
	vegeta.ConstantPacer
	n uint64
}

func (p countedPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= p.n {
		return 0, true
	}
	return p.ConstantPacer.Pace(elapsed, hits)
}

// Sleep waits d or until ctx is done, whichever comes first.
func Sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// RequestCount is how many requests a burst at rate for d sends: at least one.
func RequestCount(rate float64, d time.Duration) int {
	return max(int(math.Round(rate*d.Seconds())), 1)
}
