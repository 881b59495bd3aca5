package httpx

import (
	"sync"
	"testing"
)

// TestIDSourceUnique: ids made by many goroutines at once, across several
// chunks, are all distinct and carry the prefix, and each header value is its
// own (length and capacity 1: appending to one never writes into another's).
func TestIDSourceUnique(t *testing.T) {
	s := &idSource{prefix: "p-"}
	const workers, each = 8, 3 * idChunk
	ids := make(chan string, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range each {
				v := s.slot(i%5 == 0)
				if len(v) != 1 || cap(v) != 1 {
					t.Errorf("slot len %d cap %d, want 1 and 1", len(v), cap(v))
					return
				}
				if i%5 == 0 {
					if v[0] != "" {
						t.Errorf("slot(given) = %q, want empty for the caller's id", v[0])
					}
					continue
				}
				ids <- v[0]
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] || len(id) < 3 || id[:2] != "p-" {
			t.Fatalf("id %q: duplicate or without the prefix", id)
		}
		seen[id] = true
	}
}
