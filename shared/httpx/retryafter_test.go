package httpx_test

import (
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/httpx"
)

// TestRetryAfterSeconds: the least wait is rounded up to whole seconds (at
// least one), and the jitter takes every value of 0 to RetryAfterSpread.
func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		least    time.Duration
		from, to int
	}{
		{0, 1, 3},
		{time.Millisecond, 1, 3},
		{time.Second, 1, 3},
		{1500 * time.Millisecond, 2, 4},
		{5 * time.Second, 5, 7},
	} {
		seen := map[int]int{}
		for range 1000 {
			n := httpx.RetryAfterSeconds(tc.least)
			if n < tc.from || n > tc.to {
				t.Fatalf("RetryAfterSeconds(%v) = %d, want %d to %d", tc.least, n, tc.from, tc.to)
			}
			seen[n]++
		}
		if len(seen) != tc.to-tc.from+1 {
			t.Errorf("RetryAfterSeconds(%v) over 1,000 draws took %v, want every value of %d to %d", tc.least, seen, tc.from, tc.to)
		}
	}
}
