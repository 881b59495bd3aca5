package main

import (
	"strconv"
	"strings"
	"time"
)

// parseWhen reads a time flag: "now", an offset from now ("+24h", "-30m",
// "+2d", Go durations plus whole days), or an RFC 3339 time. Relative times
// let a script (and the README's sale day) say "a day from now" without date
// arithmetic in the shell.
func parseWhen(s string, now time.Time) (time.Time, error) {
	switch {
	case s == "now":
		return now.UTC().Truncate(time.Second), nil
	case strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-"):
		d, err := parseOffset(s[1:])
		if err != nil {
			return time.Time{}, usagef("%q is not an offset such as +24h, -30m or +2d", s)
		}
		if s[0] == '-' {
			d = -d
		}
		return now.UTC().Add(d).Truncate(time.Second), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("%q is not now, an offset such as +24h, or an RFC 3339 time such as 2027-01-01T00:00:00Z", s)
	}
	return t, nil
}

// parseOffset reads a Go duration, or a whole number of days ("2d").
func parseOffset(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, strconv.ErrSyntax
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, strconv.ErrSyntax
	}
	return d, nil
}
