package load

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 99, 0},
		{[]time.Duration{7}, 50, 7},
		{[]time.Duration{7}, 99.9, 7},
		{hundred, 50, 50 * time.Millisecond},
		{hundred, 90, 90 * time.Millisecond},
		{hundred, 99, 99 * time.Millisecond},
		{hundred, 99.9, 100 * time.Millisecond},
		{hundred, 100, 100 * time.Millisecond},
		{hundred, 0.1, 1 * time.Millisecond},
		{thousand, 99.9, 999 * time.Millisecond},
		{thousand, 99, 990 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := Percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("Percentile(%d values, %v) = %v, want %v", len(tt.sorted), tt.p, got, tt.want)
		}
	}
}

func TestLatencyOf(t *testing.T) {
	ds := []time.Duration{4 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond}
	got := LatencyOf(ds)
	want := Latency{Count: 4, Mean: 2.5, P50: 2, P90: 4, P99: 4, P999: 4, Max: 4}
	if got != want {
		t.Errorf("LatencyOf(1..4ms) = %+v, want %+v", got, want)
	}
	if got := LatencyOf(nil); got != (Latency{}) {
		t.Errorf("LatencyOf(nil) = %+v, want zero", got)
	}
}

func TestHistogram(t *testing.T) {
	all := []time.Duration{100 * time.Microsecond, 500 * time.Microsecond, 3 * time.Millisecond, 10 * time.Second}
	bs := Histogram(all, all[:1])
	if len(bs) != len(bucketBounds)+1 {
		t.Fatalf("Histogram: %d buckets, want %d", len(bs), len(bucketBounds)+1)
	}
	wantAll := map[int]int{0: 1, 1: 1, 3: 1, len(bucketBounds): 1} // 0.5ms falls in [0.5, 1)
	for i, b := range bs {
		if b.All != wantAll[i] {
			t.Errorf("Histogram bucket %d [%g, %g) = %d, want %d", i, b.FromMs, b.ToMs, b.All, wantAll[i])
		}
	}
	if bs[0].OK != 1 || bs[len(bs)-1].ToMs != 0 {
		t.Errorf("Histogram: first bucket admitted %d (want 1), last bucket bound %g (want open)", bs[0].OK, bs[len(bs)-1].ToMs)
	}
}
