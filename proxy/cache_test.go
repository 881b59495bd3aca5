package main

import (
	"fmt"
	"testing"
	"time"
)

// TestTTLCache: an entry answers until its TTL, Del and Clear drop entries,
// and the cache never holds more than its bound: a flood of new keys drops
// expired entries first, then arbitrary ones.
func TestTTLCache(t *testing.T) {
	c := newTTLCache[int](3)
	c.Set("a", 1, time.Hour)
	c.Set("gone", 2, -time.Second) // already expired
	if v, ok := c.Get("a"); !ok || v != 1 {
		t.Fatalf("Get(a) = %d, %v, want 1, true", v, ok)
	}
	if _, ok := c.Get("gone"); ok {
		t.Fatalf("Get(gone) found an expired entry")
	}
	c.Set("b", 3, time.Hour)
	c.Set("c", 4, time.Hour) // full: the expired entry makes room
	for _, k := range []string{"a", "b", "c"} {
		if _, ok := c.Get(k); !ok {
			t.Fatalf("Get(%s) after evicting the expired entry: missing", k)
		}
	}
	for i := range 100 {
		c.Set(fmt.Sprint("flood", i), i, time.Hour)
		if n := len(c.entries); n > 3 {
			t.Fatalf("cache holds %d entries, bound 3", n)
		}
	}
	c.Del("flood99")
	if _, ok := c.Get("flood99"); ok {
		t.Fatalf("Get after Del found the entry")
	}
	c.Clear()
	if n := len(c.entries); n != 0 {
		t.Fatalf("Clear left %d entries", n)
	}
}
