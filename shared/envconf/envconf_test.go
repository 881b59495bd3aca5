package envconf

import (
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
	} {
		r := NewFrom(map[string]string{"V": "nope", "Z": "0"})
		read(r)
		assert.Error(t, r.Err(), name)
	}
}

func TestTokens(t *testing.T) {
	r := NewFrom(map[string]string{"T": "alice:ta,bob.ops:t:b"})
	got := r.Tokens("T")
	assert.NoError(t, r.Err())
	assert.Equal(t, map[string]string{"alice": "ta", "bob.ops": "t:b"}, got)
	assert.Nil(t, r.Tokens("MISSING"))

	for _, bad := range []string{
		"alice", "alice:", ":ta", "alice:ta,", "al ice:ta", "alice:t a", "alice:ta,alice:tb",
		"alice:ta,bob:ta", "a{b}:ta", "alice:ta,,bob:tb",
	} {
		r := NewFrom(map[string]string{"LEDGER_TOKENS": bad})
		if got := r.Tokens("LEDGER_TOKENS"); got != nil || r.Err() == nil {
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
