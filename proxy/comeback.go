package main

import (
	"hash/maphash"
	"sync"
	"time"
)

// comebacks remembers until when a client key or an order was asked to stay
// away (the Retry-After of its last 503 or 429), so that one that comes back
// sooner is refused again without being decided. It is bounded (at most max
// entries, spread over shards) and forgets an entry once its time has
// passed. It is a map of its own rather than a ristretto cache: ristretto
// takes a write asynchronously and may drop it, and a client that retries at
// once comes back within a millisecond; losing an entry to the bound only
// lets one early retry through, to be decided as any other.
type comebacks struct {
	seed   maphash.Seed
	shards [comebackShards]comebackShard
}

const comebackShards = 16

// comebackSweepEvery bounds how often a full shard looks for passed entries;
// in between, a full shard makes room by dropping any one.
const comebackSweepEvery = 100 * time.Millisecond

type comebackShard struct {
	mu      sync.Mutex
	max     int
	until   map[string]time.Time
	sweptAt time.Time
}

func newComebacks(most int) *comebacks {
	cb := &comebacks{seed: maphash.MakeSeed()}
	for i := range cb.shards {
		cb.shards[i].max = max(most/comebackShards, 1)
		cb.shards[i].until = map[string]time.Time{}
	}
	return cb
}

func (cb *comebacks) shard(key string) *comebackShard {
	return &cb.shards[maphash.String(cb.seed, key)%comebackShards]
}

// set records that key is to stay away until then.
func (cb *comebacks) set(key string, until, now time.Time) {
	s := cb.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.until[key]; !ok && len(s.until) >= s.max {
		s.makeRoom(now)
	}
	s.until[key] = until
}

// makeRoom drops the passed entries (at most once per comebackSweepEvery),
// else any one entry.
func (s *comebackShard) makeRoom(now time.Time) {
	if now.Sub(s.sweptAt) >= comebackSweepEvery {
		s.sweptAt = now
		for k, t := range s.until {
			if !t.After(now) {
				delete(s.until, k)
			}
		}
		if len(s.until) < s.max {
			return
		}
	}
	for k := range s.until {
		delete(s.until, k)
		return
	}
}

// early returns until when key is to stay away, when that is after now.
func (cb *comebacks) early(key string, now time.Time) (time.Time, bool) {
	s := cb.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.until[key]
	if !ok {
		return time.Time{}, false
	}
	if !t.After(now) {
		delete(s.until, key)
		return time.Time{}, false
	}
	return t, true
}

// len returns the entries held, passed or not.
func (cb *comebacks) len() int {
	n := 0
	for i := range cb.shards {
		s := &cb.shards[i]
		s.mu.Lock()
		n += len(s.until)
		s.mu.Unlock()
	}
	return n
}
