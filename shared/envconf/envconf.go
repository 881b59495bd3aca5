// Package envconf reads typed settings from environment variables with
// defaults, and runs a service's main. Only a service's main calls it, once,
// to fill its Config.
//
// Every read also declares the setting (name, default, meaning) on the Reader,
// so that --help is printed from the very calls that read the configuration:
// a setting gets its help line by passing its meaning as the last argument of
// the read, e.g. e.Duration("SOLDOUT_TTL", 2*time.Second, "how long ...").
package envconf

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Reader collects the first error so that main can read every setting and
// check once.
type Reader struct {
	lookup   func(string) (string, bool)
	err      error
	settings []Setting
	seen     map[string]bool
}

// Setting is one variable a service reads, as --help prints it.
type Setting struct {
	Name    string
	Default string // as written in the environment; "" when unset by default
	Help    string // its meaning; "" when the read gave none
	Accepts string // what the read accepts beyond its type, e.g. "at least 1s"
}

// Settings returns every setting read so far, in the order first read.
func (r *Reader) Settings() []Setting { return r.settings }

// declare records a setting for --help. A setting read twice keeps its first
// declaration.
func (r *Reader) declare(name, def, accepts string, help []string) {
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if r.seen[name] {
		return
	}
	r.seen[name] = true
	r.settings = append(r.settings, Setting{Name: name, Default: def, Help: strings.Join(help, " "), Accepts: accepts})
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

// String returns the variable or def. help (optional, as in every read) is
// the setting's meaning for --help.
func (r *Reader) String(name, def string, help ...string) string {
	r.declare(name, def, "", help)
	if v, ok := r.get(name); ok {
		return v
	}
	return def
}

// Addr returns a listen address host:port (the host may be empty: every
// interface; the port a number, 0 for any free one), or def; an empty def
// leaves the setting optional.
func (r *Reader) Addr(name, def string, help ...string) string {
	r.declare(name, def, "host:port", help)
	v, ok := r.get(name)
	if !ok {
		return def
	}
	if _, port, err := net.SplitHostPort(v); err != nil || !validPort(port) {
		r.fail(name, "host:port such as 127.0.0.1:8080", v)
		return def
	}
	return v
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

// URL returns an absolute URL with one of schemes and a host, or def.
func (r *Reader) URL(name, def string, schemes []string, help ...string) string {
	r.declare(name, def, "a URL: "+strings.Join(schemes, ":// or ")+"://", help)
	v, ok := r.get(name)
	if !ok {
		return def
	}
	u, err := url.Parse(v)
	if err != nil || !slices.Contains(schemes, u.Scheme) || u.Host == "" {
		r.fail(name, "a URL such as "+schemes[0]+"://127.0.0.1:8081", v)
		return def
	}
	return v
}

// Duration returns a positive duration such as 15m or 250ms, or def.
func (r *Reader) Duration(name string, def time.Duration, help ...string) time.Duration {
	r.declare(name, formatDuration(def), "", help)
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

// formatDuration writes d as a person would set it: 15m, not 15m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// DurationMin returns a duration of at least min (which may be 0), or def:
// below min a setting would break a promise, and the message names the bound.
func (r *Reader) DurationMin(name string, def, min time.Duration, help ...string) time.Duration {
	r.declare(name, formatDuration(def), "at least "+formatDuration(min), help)
	v, ok := r.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < min {
		example := def
		if example <= 0 {
			example = 100 * time.Millisecond
		}
		r.fail(name, "a duration of at least "+min.String()+" such as "+example.String(), v)
		return def
	}
	return d
}

// ErrBadSetting marks an error of run that is a setting refused once the
// service could check it (against another service's): Main exits 2 for it, as
// for a configuration refused at once.
var ErrBadSetting = errors.New("bad configuration")

// Int returns an integer >= min, or def.
func (r *Reader) Int(name string, def, min int, help ...string) int {
	r.declare(name, strconv.Itoa(def), fmt.Sprintf("at least %d", min), help)
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

// Switch returns true for on, true or 1, false for off, false or 0 (any
// case), or def.
func (r *Reader) Switch(name string, def bool, help ...string) bool {
	r.declare(name, map[bool]string{true: "on", false: "off"}[def], "on/off, true/false, 1/0", help)
	v, ok := r.get(name)
	if !ok {
		return def
	}
	switch strings.ToLower(v) {
	case "on", "true", "1":
		return true
	case "off", "false", "0":
		return false
	}
	r.fail(name, "on, off, true, false, 1 or 0", v)
	return def
}

// OneOf returns the variable when it is one of choices (the first is the
// default), or that default.
func (r *Reader) OneOf(name string, choices []string, help ...string) string {
	r.declare(name, choices[0], strings.Join(choices, ", "), help)
	v, ok := r.get(name)
	if !ok {
		return choices[0]
	}
	for _, c := range choices {
		if strings.EqualFold(v, c) {
			return c
		}
	}
	r.fail(name, "one of "+strings.Join(choices, ", "), v)
	return choices[0]
}

// Credential is one named bearer token and the scopes it holds.
type Credential struct {
	Token  string
	Scopes []string // nil: every scope (a token written without a scope list)
}

// Tokens returns named bearer tokens written "name:token[:scope+scope...]",
// comma-separated, or none when the variable is unset. Names match
// ^[A-Za-z0-9_.-]{1,64}$ (they become the actor of audited changes) and are
// unique; tokens are non-empty, without spaces, and unique, so that a token
// names exactly one actor. A token written with a scope list holds those of
// scopes only (each must be one of them); without one it holds every scope.
// A token holding ':' must end with its scope list: the part after the last
// ':' is always read as one.
func (r *Reader) Tokens(name string, scopes []string, help ...string) map[string]Credential {
	r.declare(name, "", "name:token[:scope+scope...],...; scopes "+strings.Join(scopes, ", "), help)
	v, ok := r.get(name)
	if !ok {
		return nil
	}
	tokens, err := parseTokens(v, scopes)
	if err != nil {
		if r.err == nil {
			// The value holds secrets: the message says where, never what.
			r.err = fmt.Errorf("%s must be name:token[:scope+scope...] items separated by commas: %w", name, err)
		}
		return nil
	}
	return tokens
}

var tokenNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func parseTokens(s string, known []string) (map[string]Credential, error) {
	tokens := map[string]Credential{}
	owner := map[string]string{} // token -> name
	for i, item := range strings.Split(s, ",") {
		name, token, ok := strings.Cut(item, ":")
		var scopes []string
		if j := strings.LastIndexByte(token, ':'); ok && j >= 0 {
			var err error
			if scopes, err = parseScopes(token[j+1:], known); err != nil {
				return nil, fmt.Errorf("item %d (%s): %w", i+1, name, err)
			}
			token = token[:j]
		}
		switch {
		case !ok:
			return nil, fmt.Errorf("item %d is not name:token", i+1)
		case !tokenNamePattern.MatchString(name):
			return nil, fmt.Errorf("item %d: the name must match %s", i+1, tokenNamePattern)
		case token == "" || strings.ContainsAny(token, " \t\r\n"):
			return nil, fmt.Errorf("item %d (%s): the token must be non-empty, without spaces", i+1, name)
		case tokens[name].Token != "":
			return nil, fmt.Errorf("item %d: the name %s appears twice", i+1, name)
		case owner[token] != "":
			return nil, fmt.Errorf("item %d (%s): the same token as %s", i+1, name, owner[token])
		}
		tokens[name], owner[token] = Credential{Token: token, Scopes: scopes}, name
	}
	return tokens, nil
}

// parseScopes reads a scope list "a+b": each of known, at least one. The
// error does not repeat what it read: an old token holding ':' would land here.
func parseScopes(s string, known []string) ([]string, error) {
	var scopes []string
	for _, sc := range strings.Split(s, "+") {
		if !slices.Contains(known, sc) {
			return nil, fmt.Errorf("what follows the token's last ':' must be scopes among %s, joined by +",
				strings.Join(known, ", "))
		}
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	return scopes, nil
}
