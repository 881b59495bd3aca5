package voucher

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestParseHoldTTL: holdTtl is a Go duration from 1s to a week; anything
// else is INVALID_REQUEST naming the field; nil is no hold of the voucher's own.
func TestParseHoldTTL(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		in   *string
		want Duration
		ok   bool
	}{
		{nil, 0, true},
		{str("3m"), Duration(3 * time.Minute), true},
		{str("90s"), Duration(90 * time.Second), true},
		{str("1s"), Duration(time.Second), true},
		{str("168h"), Duration(MaxHoldTTL), true},
		{str("999ms"), 0, false},
		{str("0"), 0, false},
		{str("-1m"), 0, false},
		{str("168h1s"), 0, false},
		{str("3 minutes"), 0, false},
		{str(""), 0, false},
	}
	for _, tt := range tests {
		got, err := ParseHoldTTL(tt.in)
		if tt.ok && (err != nil || got != tt.want) {
			t.Errorf("ParseHoldTTL(%v) = %v, %v, want %v", deref(tt.in), got, err, tt.want)
		}
		if !tt.ok {
			if e, isErr := err.(*Error); !isErr || e.Code != CodeInvalidRequest || !strings.Contains(e.Message, "holdTtl") {
				t.Errorf("ParseHoldTTL(%v) = %v, want INVALID_REQUEST naming holdTtl", deref(tt.in), err)
			}
		}
	}
}

// TestHoldJSON: a voucher's hold is answered in Go's form and read back; a
// voucher without one answers no holdTtl and holds for the fallback.
func TestHoldJSON(t *testing.T) {
	b, err := json.Marshal(Voucher{Code: "V", Terms: Terms{HoldTTL: Duration(3 * time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	var v Voucher
	if err := json.Unmarshal(b, &v); err != nil || v.HoldTTL != Duration(3*time.Minute) || !strings.Contains(string(b), `"holdTtl":"3m0s"`) {
		t.Errorf("round trip of %s = %+v, %v", b, v, err)
	}
	if got := v.Hold(15 * time.Minute); got != 3*time.Minute {
		t.Errorf("Hold(15m) = %v, want 3m", got)
	}
	b, _ = json.Marshal(Voucher{Code: "V"})
	if strings.Contains(string(b), "holdTtl") {
		t.Errorf("a voucher without a hold answered %s", b)
	}
	if got := (Voucher{}).Hold(15 * time.Minute); got != 15*time.Minute {
		t.Errorf("Hold(15m) without a hold = %v, want 15m", got)
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}
