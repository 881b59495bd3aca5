package wait

import (
	"context"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	if !For(context.Background(), time.Millisecond) {
		t.Error("For(background, 1ms) = false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if For(ctx, time.Hour) {
		t.Error("For(cancelled, 1h) = true, want false")
	}
}

func TestWithinGivesUpBeforeTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if Within(ctx, time.Hour) {
		t.Error("Within(1 min left, 1h) = true, want false")
	}
	if time.Since(start) > 10*time.Second {
		t.Error("Within waited, want it to give up at once")
	}
	if !Within(ctx, time.Millisecond) {
		t.Error("Within(1 min left, 1ms) = false, want true")
	}
}
