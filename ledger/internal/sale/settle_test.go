package sale

import (
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Parked orders are due until they are older than unsettledGiveUp by the
// Settler's clock; then they are forgotten (the reconciler settles them).
func TestSettlerForgetsParkedOrdersAfterGiveUp(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	s := NewSettler(nil, nil, func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.Park("A", []string{"a1", "a2"})
	now = now.Add(time.Minute)
	s.Park("A", []string{"a1"}) // parked again: keeps its first failure
	s.Park("B", []string{"b1"})

	for _, tc := range []struct {
		after time.Duration
		want  map[string]int
	}{
		{0, map[string]int{"A": 2, "B": 1}},
		{unsettledGiveUp - time.Minute, map[string]int{"A": 2, "B": 1}},
		{time.Second, map[string]int{"B": 1}},
		{time.Minute, map[string]int{}},
	} {
		now = now.Add(tc.after)
		got := map[string]int{}
		for code, ids := range s.due() {
			got[code] = len(ids)
		}
		assert.Equal(t, tc.want, got, "due() after %v more", tc.after)
	}
	assert.Empty(t, s.Unsettled, "codes with no parked order are dropped")
}

// A parked order is due only once its fence has passed since its last failed
// write returned, and while no write of it is in flight (another lane's batch
// may still commit it).
func TestSettlerWaitsForFenceAndWrites(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	s := NewSettler(nil, nil, func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.WaitAfterFault(time.Second)
	done := s.writing("A", []string{"a1"})
	s.Park("A", []string{"a1", "a2"})
	due := func() map[string][]string {
		got := s.due()
		for _, ids := range got {
			sort.Strings(ids)
		}
		return got
	}
	assert.Empty(t, due(), "due() within the fence")
	now = now.Add(time.Second)
	assert.Equal(t, map[string][]string{"A": {"a2"}}, due(), "a1's other write is in flight")
	s.Park("A", []string{"a2"}) // failed again: a new fence
	done()
	assert.Equal(t, map[string][]string{"A": {"a1"}}, due())
	now = now.Add(time.Second)
	assert.Equal(t, map[string][]string{"A": {"a1", "a2"}}, due())
	assert.Empty(t, s.Writes, "no write in flight is tracked once done")
}
