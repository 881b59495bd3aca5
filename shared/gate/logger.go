package gate

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Logger carries go-redis's own log lines (its pool's dial failures, a
// subscription's reconnects) into a service's JSON log: main passes it to
// redis.SetLogger, so that no plain-text line reaches stderr beside the JSON
// ones.
type Logger struct {
	log *slog.Logger
}

// NewLogger returns the go-redis logger writing to log.
func NewLogger(log *slog.Logger) Logger { return Logger{log: log} }

// Printf writes one go-redis line at WARN, or at DEBUG for a failed dial: the
// call that needed the connection gets the same error, and whoever answers it
// logs it once (a warm-up, a watcher, a request's 503), naming REDIS_URL
// where it matters; at WARN a dead Redis would print one line per pool slot.
func (l Logger) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	level := slog.LevelWarn
	if strings.Contains(msg, "failed to dial") {
		level = slog.LevelDebug
	}
	l.log.Log(ctx, level, msg, "source", "go-redis")
}
