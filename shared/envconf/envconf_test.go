package envconf

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestReader(t *testing.T) {
	r := NewFrom(map[string]string{"A": "x", "D": "2s", "N": "7", "S": "off", "E": ""})
	assert.Equal(t, "x", r.String("A", "d"))
	assert.Equal(t, "d", r.String("E", "d"), "empty means unset")
	assert.Equal(t, 2*time.Second, r.Duration("D", time.Minute))
	assert.Equal(t, time.Minute, r.Duration("MISSING", time.Minute))
	assert.Equal(t, 7, r.Int("N", 1, 1))
	assert.False(t, r.Switch("S", true))
	assert.NoError(t, r.Err())

	for name, read := range map[string]func(*Reader){
		"bad duration": func(r *Reader) { r.Duration("V", time.Second) },
		"bad int":      func(r *Reader) { r.Int("V", 1, 1) },
		"int too low":  func(r *Reader) { r.Int("Z", 1, 1) },
		"bad switch":   func(r *Reader) { r.Switch("V", true) },
		"bad choice":   func(r *Reader) { r.OneOf("V", []string{"a", "b"}) },
	} {
		r := NewFrom(map[string]string{"V": "nope", "Z": "0"})
		read(r)
		assert.Error(t, r.Err(), name)
	}
}

func TestTokens(t *testing.T) {
	scopes := []string{"reserve", "settle", "read"}
	r := NewFrom(map[string]string{"T": "alice:ta,bob.ops:t:b:read,pay:tp:settle+reserve+settle,ro:tr:read"})
	got := r.Tokens("T", scopes)
	assert.NoError(t, r.Err())
	assert.Equal(t, map[string]Credential{
		"alice":   {Token: "ta"},
		"bob.ops": {Token: "t:b", Scopes: []string{"read"}},
		"pay":     {Token: "tp", Scopes: []string{"settle", "reserve"}},
		"ro":      {Token: "tr", Scopes: []string{"read"}},
	}, got)
	assert.Nil(t, r.Tokens("MISSING", scopes))

	for _, bad := range []string{
		"alice", "alice:", ":ta", "alice:ta,", "al ice:ta", "alice:t a", "alice:ta,alice:tb",
		"alice:ta,bob:ta", "a{b}:ta", "alice:ta,,bob:tb",
		"alice:ta:", "alice:ta:write", "alice:ta:read+", "alice:ta:read+write", "alice:ta:b", ":ta:read",
		"alice::read", "alice:ta:read,bob:ta:settle",
	} {
		r := NewFrom(map[string]string{"LEDGER_TOKENS": bad})
		if got := r.Tokens("LEDGER_TOKENS", scopes); got != nil || r.Err() == nil {
			t.Errorf("Tokens(%q) = %v, %v, want an error", bad, got, r.Err())
			continue
		}
		assert.Contains(t, r.Err().Error(), "LEDGER_TOKENS", "the error names the variable")
		if strings.Contains(bad, "ta") {
			assert.NotContains(t, r.Err().Error(), ":ta", "the error does not repeat a token")
		}
	}
}

func TestDurationMin(t *testing.T) {
	r := NewFrom(map[string]string{"ZERO": "0s", "OK": "2s"})
	assert.Equal(t, time.Duration(0), r.DurationMin("ZERO", 5*time.Second, 0), "0 is allowed when the floor is 0")
	assert.Equal(t, 2*time.Second, r.DurationMin("OK", 30*time.Second, time.Second))
	assert.Equal(t, 30*time.Second, r.DurationMin("MISSING", 30*time.Second, time.Second))
	assert.NoError(t, r.Err())

	for _, bad := range []string{"1ns", "999ms", "-1s", "soon"} {
		r := NewFrom(map[string]string{"HANGING_GRACE": bad})
		r.DurationMin("HANGING_GRACE", 30*time.Second, time.Second)
		if r.Err() == nil {
			t.Errorf("DurationMin(HANGING_GRACE=%q) accepted it, want an error", bad)
			continue
		}
		// The message names the variable and the bound.
		assert.Contains(t, r.Err().Error(), "HANGING_GRACE")
		assert.Contains(t, r.Err().Error(), "at least 1s")
	}
}

func TestSwitch(t *testing.T) {
	for v, want := range map[string]bool{
		"on": true, "true": true, "1": true, "True": true, "ON": true,
		"off": false, "false": false, "0": false, "FALSE": false, "Off": false,
	} {
		r := NewFrom(map[string]string{"S": v})
		if got := r.Switch("S", !want); got != want || r.Err() != nil {
			t.Errorf("Switch(S=%q) = %v, %v, want %v", v, got, r.Err(), want)
		}
	}
	for _, bad := range []string{"yes", "2", "enabled", "o n"} {
		r := NewFrom(map[string]string{"PROXY_COALESCE": bad})
		r.Switch("PROXY_COALESCE", true)
		if r.Err() == nil || !strings.Contains(r.Err().Error(), "PROXY_COALESCE") {
			t.Errorf("Switch(PROXY_COALESCE=%q) err = %v, want one naming the variable", bad, r.Err())
		}
	}
}

// TestSettings checks that every read declares its setting once, in order,
// with its default as it would be written and its meaning.
func TestSettings(t *testing.T) {
	r := NewFrom(map[string]string{"A": "set"})
	r.String("A", "x", "the a")
	r.Duration("B", 15*time.Minute, "the b")
	r.DurationMin("C", 0, 0)
	r.Int("D", 7, 1, "the d")
	r.Switch("E", false, "the e")
	r.Tokens("F", []string{"x", "y"}, "the f")
	r.OneOf("G", []string{"info", "debug"}, "the g")
	r.String("A", "other", "read twice")
	want := []Setting{
		{Name: "A", Default: "x", Help: "the a"},
		{Name: "B", Default: "15m", Help: "the b"},
		{Name: "C", Default: "0s", Accepts: "at least 0s"},
		{Name: "D", Default: "7", Help: "the d", Accepts: "at least 1"},
		{Name: "E", Default: "off", Help: "the e", Accepts: "on/off, true/false, 1/0"},
		{Name: "F", Help: "the f", Accepts: "name:token[:scope+scope...],...; scopes x, y"},
		{Name: "G", Default: "info", Help: "the g", Accepts: "info, debug"},
	}
	assert.Equal(t, want, r.Settings())
}

type testConfig struct{ Addr string }

func testConfigFrom(e *Reader) (testConfig, error) {
	c := testConfig{Addr: e.String("TEST_ADDR", "127.0.0.1:1", "listen address")}
	e.String("TEST_REQUIRED", "", "required: the thing")
	return c, errors.New("TEST_REQUIRED is required") // help must print all the same
}

// TestCommand checks the command line every service takes: --help and
// --version exit 0 (help lists every setting, LOG_LEVEL first, even though
// a required one is missing); no argument runs; anything else exits 2.
func TestCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-help"}} {
		var out, errw strings.Builder
		code, done := Command(&out, &errw, args, "svc", "svc does things.", testConfigFrom)
		if code != 0 || !done {
			t.Fatalf("Command(%v) = %d, %v, want 0, true", args, code, done)
		}
		lines := strings.Split(out.String(), "\n")
		assert.Contains(t, out.String(), "svc does things.")
		var names []string
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(l, "  ") {
				names = append(names, f[0])
			}
		}
		assert.Equal(t, []string{"LOG_LEVEL", "GOGC", "GOMEMLIMIT", "TEST_ADDR", "TEST_REQUIRED"}, names, "%v:\n%s", args, out.String())
		assert.Regexp(t, `TEST_ADDR +127\.0\.0\.1:1 +listen address`, out.String())
		assert.Regexp(t, `TEST_REQUIRED +\(unset\) +required: the thing`, out.String())
		assert.Regexp(t, `LOG_LEVEL +info +.*\(info, debug, warn, error\)`, out.String())
	}
	var out, errw strings.Builder
	code, done := Command(&out, &errw, []string{"--version"}, "svc", "", testConfigFrom)
	assert.Equal(t, 0, code)
	assert.True(t, done)
	assert.Regexp(t, `^svc \S+ \(revision \S+\)\n$`, out.String())

	_, done = Command(&out, &errw, nil, "svc", "", testConfigFrom)
	assert.False(t, done, "no arguments: the service runs")
	code, done = Command(&out, &errw, []string{"--port=1"}, "svc", "", testConfigFrom)
	assert.Equal(t, 2, code)
	assert.True(t, done)
	assert.Contains(t, errw.String(), "--help")
}

func TestLogLevel(t *testing.T) {
	for v, want := range map[string]slog.Level{"": slog.LevelInfo, "debug": slog.LevelDebug, "WARN": slog.LevelWarn, "error": slog.LevelError} {
		r := NewFrom(map[string]string{"LOG_LEVEL": v})
		if got := LogLevel(r); got != want || r.Err() != nil {
			t.Errorf("LogLevel(LOG_LEVEL=%q) = %v, %v, want %v", v, got, r.Err(), want)
		}
	}
	r := NewFrom(map[string]string{"LOG_LEVEL": "verbose"})
	LogLevel(r)
	if r.Err() == nil || !strings.Contains(r.Err().Error(), "LOG_LEVEL") {
		t.Errorf("LogLevel(LOG_LEVEL=verbose) err = %v, want one naming LOG_LEVEL", r.Err())
	}
}

func TestGCPercent(t *testing.T) {
	for v, want := range map[string]int{"": DefaultGCPercent, "100": 100, "0": 0, "OFF": -1, "800": 800} {
		r := NewFrom(map[string]string{"GOGC": v})
		if got := GCPercent(r); got != want || r.Err() != nil {
			t.Errorf("GCPercent(GOGC=%q) = %v, %v, want %v", v, got, r.Err(), want)
		}
	}
	for _, v := range []string{"-5", "lots", "1.5"} {
		r := NewFrom(map[string]string{"GOGC": v})
		GCPercent(r)
		if r.Err() == nil || !strings.Contains(r.Err().Error(), "GOGC") {
			t.Errorf("GCPercent(GOGC=%q) err = %v, want one naming GOGC", v, r.Err())
		}
	}
}

// TestAddrAndURL checks that a listen address and a URL are refused at
// once, naming the variable and the form wanted, when they are malformed.
func TestAddrAndURL(t *testing.T) {
	for v, ok := range map[string]bool{
		"127.0.0.1:8080": true, ":8080": true, "localhost:0": true, "[::1]:9090": true,
		"nonsense": false, "127.0.0.1": false, "127.0.0.1:http": false, "127.0.0.1:70000": false, "http://127.0.0.1:8080": false,
	} {
		r := NewFrom(map[string]string{"PROXY_ADDR": v})
		got := r.Addr("PROXY_ADDR", "127.0.0.1:8080")
		switch err := r.Err(); {
		case ok && (err != nil || got != v):
			t.Errorf("Addr(PROXY_ADDR=%q) = %q, %v, want it", v, got, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "PROXY_ADDR") || !strings.Contains(err.Error(), "host:port")):
			t.Errorf("Addr(PROXY_ADDR=%q) err = %v, want one naming PROXY_ADDR and host:port", v, err)
		}
	}
	schemes := []string{"http", "https"}
	for v, ok := range map[string]bool{
		"http://127.0.0.1:8081": true, "https://ledger.internal": true, "http://ledger:8081/base": true,
		"localhost:8081": false, "127.0.0.1:8081": false, "ledger": false, "ftp://ledger": false, "http://": false, "http:///x": false,
	} {
		r := NewFrom(map[string]string{"LEDGER_URL": v})
		got := r.URL("LEDGER_URL", "http://127.0.0.1:8081", schemes)
		switch err := r.Err(); {
		case ok && (err != nil || got != v):
			t.Errorf("URL(LEDGER_URL=%q) = %q, %v, want it", v, got, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "LEDGER_URL") || !strings.Contains(err.Error(), "http://")):
			t.Errorf("URL(LEDGER_URL=%q) err = %v, want one naming LEDGER_URL and http://", v, err)
		}
	}
	r := NewFrom(nil)
	if got := r.Addr("DEBUG_ADDR", ""); got != "" || r.Err() != nil {
		t.Errorf("Addr(DEBUG_ADDR unset) = %q, %v, want it unset", got, r.Err())
	}
}
