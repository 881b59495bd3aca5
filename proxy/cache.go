package main

import (
	"sync"
	"time"
)

// ttlCache is a bounded map whose entries expire: the admitter's voucher
// terms and sold-out flags. Every reserve reads it, so a read is a read lock
// and a map lookup, nothing more (ristretto, used before, recorded each read
// for its admission policy: a tenth of a sold-out answer's CPU). It holds at
// most max entries: a new key past that drops the expired ones, else an
// arbitrary one, so a flood of unknown codes costs at most a re-read of the
// hot voucher (one per lookup, shared by singleflight).
type ttlCache[V any] struct {
	max int

	mu      sync.RWMutex
	entries map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func newTTLCache[V any](max int) *ttlCache[V] {
	return &ttlCache[V]{max: max, entries: make(map[string]ttlEntry[V])}
}

// Get returns key's value unless it is missing or expired.
func (c *ttlCache[V]) Get(key string) (V, bool) {
	c.mu.RLock()
	e, ok := c.entries[key]
	c.mu.RUnlock()
	if !ok || !time.Now().Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Set keeps v under key for ttl.
func (c *ttlCache[V]) Set(key string, v V, ttl time.Duration) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[key]; !ok && len(c.entries) >= c.max {
		c.evict(now)
	}
	c.entries[key] = ttlEntry[V]{v: v, expires: now.Add(ttl)}
}

// evict makes room for one entry: the expired ones go, else any one.
func (c *ttlCache[V]) evict(now time.Time) {
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, k)
		}
	}
	for k := range c.entries {
		if len(c.entries) < c.max {
			return
		}
		delete(c.entries, k)
	}
}

// Del drops key.
func (c *ttlCache[V]) Del(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// Clear drops every entry.
func (c *ttlCache[V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
}
