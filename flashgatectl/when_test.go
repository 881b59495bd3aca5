package main

import (
	"testing"
	"time"
)

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 30, 15, 500_000_000, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"now", time.Date(2026, 12, 4, 11, 30, 15, 0, time.UTC), true},
		{"+24h", time.Date(2026, 12, 5, 11, 30, 15, 0, time.UTC), true},
		{"-30m", time.Date(2026, 12, 4, 11, 0, 15, 0, time.UTC), true},
		{"+2d", time.Date(2026, 12, 6, 11, 30, 15, 0, time.UTC), true},
		{"+1h30m", time.Date(2026, 12, 4, 13, 0, 15, 0, time.UTC), true},
		{"2027-01-01T00:00:00Z", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"2027-01-01T01:00:00+01:00", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"", time.Time{}, false},
		{"tomorrow", time.Time{}, false},
		{"+", time.Time{}, false},
		{"+-1h", time.Time{}, false},
		{"+1.5d", time.Time{}, false},
		{"24h", time.Time{}, false},
		{"2027-01-01", time.Time{}, false},
	} {
		got, err := parseWhen(tc.in, now)
		if (err == nil) != tc.ok || (tc.ok && !got.Equal(tc.want)) {
			t.Errorf("parseWhen(%q) = %v, %v, want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && exitCode(err) != exitUsage {
			t.Errorf("parseWhen(%q)'s error exits %d, want %d", tc.in, exitCode(err), exitUsage)
		}
	}
}
