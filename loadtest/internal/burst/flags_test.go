package burst

import (
	"strings"
	"testing"
)

// A --target without the URLs a checked burst needs names the flags missing.
func TestBurstTargetFlags(t *testing.T) {
	out := t.TempDir()
	tests := []struct {
		args    []string
		wantErr string // "" for none
	}{
		{[]string{"--out", out}, ""},
		{[]string{"--out", out, "--target", "http://p"}, "--target http://p also needs --ledger, --database-url, --redis-url"},
		{[]string{"--out", out, "--target", "http://p", "--ledger", "http://l", "--redis-url", "redis://r"}, "also needs --database-url:"},
		{[]string{"--out", out, "--target", "http://p", "--ledger", "http://l", "--database-url", "postgres://d", "--redis-url", "redis://r"}, ""},
	}
	for _, tt := range tests {
		_, err := parseBurstFlags(tt.args)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("parseBurstFlags(%q) = %v, want no error", tt.args, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("parseBurstFlags(%q) = %v, want an error containing %q", tt.args, err, tt.wantErr)
		}
	}
}
