package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
)

// TestLogger checks that go-redis' lines become JSON log lines: a failed dial
// at DEBUG (its caller logs the fault), anything else at WARN.
func TestLogger(t *testing.T) {
	for format, want := range map[string]string{
		"redis: connection pool: failed to dial after %d attempts: %v": "DEBUG",
		"redis: discarding bad PubSub connection: %v":                  "WARN",
	} {
		var out bytes.Buffer
		l := NewLogger(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))
		l.Printf(context.Background(), format, 1, "connection refused")
		var line struct{ Level, Msg, Source string }
		if err := json.Unmarshal(out.Bytes(), &line); err != nil {
			t.Fatalf("Printf(%q) wrote %q, want one JSON line: %v", format, out.String(), err)
		}
		if line.Level != want || line.Source != "go-redis" {
			t.Errorf("Printf(%q) = %+v, want level %s, source go-redis", format, line, want)
		}
	}
}
