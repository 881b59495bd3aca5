// Package wait is the one sleep that a context ends early, for the packages
// that retry (the gate's change subscription, the Go client).
package wait

import (
	"context"
	"time"
)

// For waits d and reports true, or false as soon as ctx ends.
func For(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Within is For that gives up at once (false) when ctx would end before d
// has passed: a retry after the wait could not be sent in time.
func Within(ctx context.Context, d time.Duration) bool {
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d {
		return false
	}
	return For(ctx, d)
}
