package load

import (
	"math"
	"slices"
	"time"
)

// Latency summarizes a set of request latencies. JSON carries milliseconds.
type Latency struct {
	Count int     `json:"count"`
	Mean  float64 `json:"meanMs"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P99   float64 `json:"p99Ms"`
	P999  float64 `json:"p999Ms"`
	Max   float64 `json:"maxMs"`
}

// LatencyOf computes exact percentiles of ds (nearest rank). ds is sorted in place.
func LatencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Latency{
		Count: len(ds),
		Mean:  Millis(sum / time.Duration(len(ds))),
		P50:   Millis(Percentile(ds, 50)),
		P90:   Millis(Percentile(ds, 90)),
		P99:   Millis(Percentile(ds, 99)),
		P999:  Millis(Percentile(ds, 99.9)),
		Max:   Millis(ds[len(ds)-1]),
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of sorted:
// the smallest value that at least p% of the values are at or below. No
// interpolation, so p99 of 100 values is the 99th value and p99.9 is the max.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// The epsilon keeps float error (99.9% of 1000 = 999.0000000000001) from
	// moving the rank up by one.
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// bucketBounds are the upper bounds of the latency histogram, roughly 1-2-5 per
// decade; the last bucket is open.
var bucketBounds = []time.Duration{
	500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second,
}

// Bucket is one bar of the latency histogram: requests that took [From, To).
// To is 0 for the last, open bucket.
type Bucket struct {
	FromMs float64 `json:"fromMs"`
	ToMs   float64 `json:"toMs,omitempty"`
	All    int     `json:"all"`
	OK     int     `json:"admitted"`
}

// Histogram counts all and admitted latencies into bucketBounds.
func Histogram(all, admitted []time.Duration) []Bucket {
	bs := make([]Bucket, len(bucketBounds)+1)
	for i := range bs {
		if i > 0 {
			bs[i].FromMs = Millis(bucketBounds[i-1])
		}
		if i < len(bucketBounds) {
			bs[i].ToMs = Millis(bucketBounds[i])
		}
	}
	index := func(d time.Duration) int {
		i, _ := slices.BinarySearchFunc(bucketBounds, d, func(b, d time.Duration) int {
			if b <= d {
				return -1
			}
			return 1
		})
		return i
	}
	for _, d := range all {
		bs[index(d)].All++
	}
	for _, d := range admitted {
		bs[index(d)].OK++
	}
	return bs
}
