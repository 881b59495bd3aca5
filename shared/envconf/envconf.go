// Package envconf reads typed settings from environment variables with
// defaults, and runs a service's main. Only a service's main calls it, once,
// to fill its Config.
package envconf

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
)

// Reader collects the first error so that main can read every setting and
// check once.
type Reader struct {
	lookup func(string) (string, bool)
	err    error
}

// New returns a Reader over the process environment.
func New() *Reader { return &Reader{lookup: os.LookupEnv} }

// NewFrom returns a Reader over a map (for tests).
func NewFrom(m map[string]string) *Reader {
	return &Reader{lookup: func(k string) (string, bool) { v, ok := m[k]; return v, ok }}
}

// Err returns the first invalid setting met.
func (r *Reader) Err() error { return r.err }

func (r *Reader) get(name string) (string, bool) {
	v, ok := r.lookup(name)
	return v, ok && v != ""
}

func (r *Reader) fail(name, want, got string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s must be %s, not %q", name, want, got)
	}
}

// String returns the variable or def.
func (r *Reader) String(name, def string) string {
	if v, ok := r.get(name); ok {
		return v
	}
	return def
}

// Duration returns a positive duration such as 15m or 250ms, or def.
func (r *Reader) Duration(name string, def time.Duration) time.Duration {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		r.fail(name, "a positive duration such as 15m or 250ms", v)
		return def
	}
	return d
}

// Int returns an integer >= min, or def.
func (r *Reader) Int(name string, def, min int) int {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		r.fail(name, fmt.Sprintf("an integer >= %d", min), v)
		return def
	}
	return n
}

// Switch returns true for "on", false for "off", or def.
func (r *Reader) Switch(name string, def bool) bool {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	switch v {
	case "on":
		return true
	case "off":
		return false
	}
	r.fail(name, "on or off", v)
	return def
}

// Main is a service's main: JSON logs on stderr, its configuration read once
// (exit 2 when it is bad), then run until it returns (exit 1 on an error). The
// logger is handed to run, never made the process default: whatever logs gets
// it passed down.
func Main[C any](name string, config func() (C, error), run func(C, *slog.Logger) error) {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	cfg, err := config()
	if err != nil {
		log.Error("bad configuration", "err", err)
		os.Exit(2)
	}
	if err := run(cfg, log); err != nil {
		log.Error(name+" stopped", "err", err)
		os.Exit(1)
	}
}
