package verify

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
)

func TestLadderClimb(t *testing.T) {
	tests := []struct {
		name      string
		l         Ladder
		limit     float64 // rates at or below pass
		want      float64
		wantTried []float64
	}{
		{"up until a step fails", Ladder{Start: 1000, Factor: 1.5, Floor: 50, MaxSteps: 10}, 4000,
			3375, []float64{1000, 1500, 2250, 3375, 5063}},
		{"max steps", Ladder{Start: 1000, Factor: 2, Floor: 50, MaxSteps: 3}, 1e9,
			4000, []float64{1000, 2000, 4000}},
		{"down, then up below the failure", Ladder{Start: 1000, Factor: 1.5, Floor: 50, MaxSteps: 10}, 800,
			750, []float64{1000, 500, 750}},
		{"down to the floor", Ladder{Start: 1000, Factor: 1.5, Floor: 100, MaxSteps: 10}, 10,
			0, []float64{1000, 500, 250, 125}},
	}
	for _, tt := range tests {
		var tried []float64
		got, err := tt.l.Climb(func(rate float64) (bool, error) {
			tried = append(tried, rate)
			return rate <= tt.limit, nil
		})
		if err != nil || got != tt.want || !slices.Equal(tried, tt.wantTried) {
			t.Errorf("%s: Climb(%+v) = %v, %v after %v; want %v after %v", tt.name, tt.l, got, err, tried, tt.want, tt.wantTried)
		}
	}
}

func TestLadderClimbError(t *testing.T) {
	boom := errors.New("boom")
	got, err := Ladder{Start: 100, Factor: 2, MaxSteps: 5}.Climb(func(rate float64) (bool, error) {
		if rate > 300 {
			return false, boom
		}
		return true, nil
	})
	if got != 200 || !errors.Is(err, boom) {
		t.Errorf("Climb with an error at 400 = %v, %v; want 200, boom", got, err)
	}
}

func TestSustainJudge(t *testing.T) {
	ok := Summary{RequestedRate: 1000, AchievedRate: 990, All: load.Latency{P99: 20}, Pass: true, Checks: []Check{{Pass: true}}}
	tests := []struct {
		name   string
		change func(*Summary)
		want   bool
	}{
		{"all good", func(*Summary) {}, true},
		{"1% errors is fine", func(s *Summary) { s.ErrorRate = 0.01 }, true},
		{"errors", func(s *Summary) { s.ErrorRate = 0.02 }, false},
		{"p99", func(s *Summary) { s.All.P99 = 100.5 }, false},
		{"rate not achieved", func(s *Summary) { s.AchievedRate = 940 }, false},
		{"invariant", func(s *Summary) { s.Pass = false }, false},
		{"no checks (ceiling)", func(s *Summary) { s.Pass, s.Checks = false, nil }, true},
	}
	sus := Sustain{MaxErrorRate: 0.01, MaxP99: 100 * time.Millisecond, MinAchieved: 0.95}
	for _, tt := range tests {
		s := ok
		tt.change(&s)
		if got, why := sus.Judge(&s); got != tt.want {
			t.Errorf("%s: Judge = %v (%s), want %v", tt.name, got, why, tt.want)
		}
	}
}
