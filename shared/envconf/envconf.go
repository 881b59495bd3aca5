// Package envconf reads typed settings from environment variables with
// defaults, and runs a service's main. Only a service's main calls it, once,
// to fill its Config.
package envconf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
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

// DurationMin returns a duration of at least min (which may be 0), or def:
// below min a setting would break a promise, and the message names the bound.
func (r *Reader) DurationMin(name string, def, min time.Duration) time.Duration {
	v, ok := r.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < min {
		r.fail(name, "a duration of at least "+min.String()+" such as "+def.String(), v)
		return def
	}
	return d
}

// ErrBadSetting marks an error of run that is a setting refused once the
// service could check it (against another service's): Main exits 2 for it, as
// for a configuration refused at once.
var ErrBadSetting = errors.New("bad configuration")

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
		if errors.Is(err, ErrBadSetting) {
			log.Error("bad configuration", "err", err)
			os.Exit(2)
		}
		log.Error(name+" stopped", "err", err)
		os.Exit(1)
	}
}

// Tokens returns named bearer tokens written "name:token,name2:token2", or
// none when the variable is unset. Names match ^[A-Za-z0-9_.-]{1,64}$ (they
// become the actor of audited changes) and are unique; tokens are non-empty,
// without spaces, and unique, so that a token names exactly one actor.
func (r *Reader) Tokens(name string) map[string]string {
	v, ok := r.get(name)
	if !ok {
		return nil
	}
	tokens, err := parseTokens(v)
	if err != nil {
		if r.err == nil {
			// The value holds secrets: the message says where, never what.
			r.err = fmt.Errorf("%s must be name:token pairs separated by commas: %w", name, err)
		}
		return nil
	}
	return tokens
}

var tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func parseTokens(s string) (map[string]string, error) {
	tokens := map[string]string{}
	owner := map[string]string{} // token -> name
	for i, pair := range strings.Split(s, ",") {
		name, token, ok := strings.Cut(pair, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("item %d is not name:token", i+1)
		case !tokenNamePattern.MatchString(name):
			return nil, fmt.Errorf("item %d: the name must match %s", i+1, tokenNamePattern)
		case token == "" || strings.ContainsAny(token, " \t\r\n"):
			return nil, fmt.Errorf("item %d (%s): the token must be non-empty, without spaces", i+1, name)
		case tokens[name] != "":
			return nil, fmt.Errorf("item %d: the name %s appears twice", i+1, name)
		case owner[token] != "":
			return nil, fmt.Errorf("item %d (%s): the same token as %s", i+1, name, owner[token])
		}
		tokens[name], owner[token] = token, name
	}
	return tokens, nil
}
