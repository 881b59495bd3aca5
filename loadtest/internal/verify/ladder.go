package verify

import (
	"fmt"
	"math"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

// Ladder searches for the highest sustainable rate: from Start it goes up by
// Factor while steps pass. When a step fails before any passed, it goes down by
// half (not below Floor) and then up again by Factor, never to a rate at or
// above one that failed. MaxSteps bounds the steps in all.
type Ladder struct {
	Start, Factor, Floor float64
	MaxSteps             int
}

// Climb calls try with each rate to probe, in order, and returns the highest
// rate that passed, or 0 when none did. Rates are whole requests per second.
func (l Ladder) Climb(try func(rate float64) (bool, error)) (float64, error) {
	c := l.Begin()
	for rate, ok := c.Next(); ok; rate, ok = c.Next() {
		pass, err := try(rate)
		if err != nil {
			return c.Best(), err
		}
		c.Record(pass)
	}
	return c.Best(), nil
}

// Begin starts a climb that is driven step by step, so that several ladders
// can take turns (compare interleaves its paths this way).
func (l Ladder) Begin() *Climb {
	c := &Climb{l: l, rate: math.Round(l.Start), lowestFail: math.Inf(1)}
	c.settle()
	return c
}

// Climb is one ladder in progress.
type Climb struct {
	l                      Ladder
	rate, best, lowestFail float64
	steps                  int
	done                   bool
}

// Next returns the rate to try next, or false when the climb is over.
func (c *Climb) Next() (float64, bool) { return c.rate, !c.done }

// Record takes the verdict on the rate Next returned.
func (c *Climb) Record(pass bool) {
	c.steps++
	switch {
	case pass:
		c.best = c.rate
		c.rate = math.Round(c.rate * c.l.Factor)
	case c.best > 0:
		c.lowestFail = min(c.lowestFail, c.rate)
		c.done = true
		return
	default:
		c.lowestFail = min(c.lowestFail, c.rate)
		c.rate = math.Round(c.rate / 2)
	}
	c.settle()
}

// settle ends the climb when the next rate would say nothing new.
func (c *Climb) settle() {
	if c.steps >= c.l.MaxSteps || c.rate < max(c.l.Floor, 1) || c.rate >= c.lowestFail || c.rate <= c.best {
		c.done = true
	}
}

// Best is the highest rate that passed so far, 0 if none.
func (c *Climb) Best() float64 { return c.best }

// Sustain says when a step counts as sustained.
type Sustain struct {
	MaxErrorRate float64       // share of failed requests (no answer, or not 2xx/409/422)
	MaxP99       time.Duration // p99 latency of all requests
	MinAchieved  float64       // achieved rate as a share of the requested one
}

// DefaultSustain is the bar the targets are stated against.
var DefaultSustain = Sustain{MaxErrorRate: 0.01, MaxP99: 100 * time.Millisecond, MinAchieved: 0.95}

// Judge reports whether s was sustained, and if not, why.
func (c Sustain) Judge(s *Summary) (bool, string) {
	switch {
	case s.ErrorRate > c.MaxErrorRate:
		return false, fmt.Sprintf("errors %.2f%% > %.2g%%", 100*s.ErrorRate, 100*c.MaxErrorRate)
	case s.All.P99 > load.Millis(c.MaxP99):
		return false, fmt.Sprintf("p99 %.1fms > %s", s.All.P99, c.MaxP99)
	case s.AchievedRate < c.MinAchieved*s.RequestedRate:
		return false, fmt.Sprintf("achieved %.0f/s < %.0f%% of %.0f/s", s.AchievedRate, 100*c.MinAchieved, s.RequestedRate)
	case len(s.Checks) > 0 && !s.Pass:
		return false, "an invariant failed"
	}
	return true, ""
}
