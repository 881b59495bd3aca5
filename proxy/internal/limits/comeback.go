package limits

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// comebacks remembers until when a client key or an order was asked to stay
// away (the Retry-After of its last 503 or 429), so that one that comes back
// sooner is refused again without being decided, and its time is put off
// once by a penalty: a retry loop is then decided less often than a client
// that waits, never more, and never locked out (after one penalty, the next
// attempt past its time is decided, the sale may have sold out meanwhile). It is bounded (at most max
// entries, spread over shards) and forgets an entry once its time has
// passed. It is a map of its own rather than a ristretto cache: ristretto
// takes a write asynchronously and may drop it, and a client that retries at
// once comes back within a millisecond; losing an entry to the bound only
// lets one early retry through, to be decided as any other.
type comebacks struct {
	seed    maphash.Seed
	shards  [comebackShards]comebackShard
	entries atomic.Int64 // held in every shard, passed or not: holding's answer without a lock
}

const comebackShards = 16

// comebackSweepEvery bounds how often a full shard looks for passed entries;
// in between, a full shard makes room by dropping any one.
const comebackSweepEvery = 100 * time.Millisecond

type comebackShard struct {
	mu      sync.Mutex
	max     int
	until   map[string]stayAway
	sweptAt time.Time
}

// stayAway is an entry: the time given, and whether it was put off already.
type stayAway struct {
	until     time.Time
	penalized bool
}

func newComebacks(most int) *comebacks {
	cb := &comebacks{seed: maphash.MakeSeed()}
	for i := range cb.shards {
		cb.shards[i].max = max(most/comebackShards, 1)
		cb.shards[i].until = map[string]stayAway{}
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
	if _, ok := s.until[key]; !ok {
		if len(s.until) >= s.max {
			cb.entries.Add(-int64(s.makeRoom(now)))
		}
		cb.entries.Add(1)
	}
	s.until[key] = stayAway{until: until}
}

// holding reports whether any key is told to stay away (a nil cb: none): a
// reserve that finds none has nothing to be refused for.
func (cb *comebacks) holding() bool {
	return cb != nil && cb.entries.Load() > 0
}

// makeRoom drops the passed entries (at most once per comebackSweepEvery),
// else any one entry, and returns how many it dropped.
func (s *comebackShard) makeRoom(now time.Time) (dropped int) {
	if now.Sub(s.sweptAt) >= comebackSweepEvery {
		s.sweptAt = now
		for k, t := range s.until {
			if !t.until.After(now) {
				delete(s.until, k)
				dropped++
			}
		}
		if len(s.until) < s.max {
			return dropped
		}
	}
	for k := range s.until {
		delete(s.until, k)
		return dropped + 1
	}
	return dropped
}

// early reports whether key is back before its time and returns that time,
// put off by penalty the first time it is.
func (cb *comebacks) early(key string, now time.Time, penalty time.Duration) (time.Time, bool) {
	s := cb.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.until[key]
	if !ok {
		return time.Time{}, false
	}
	if !t.until.After(now) {
		delete(s.until, key)
		cb.entries.Add(-1)
		return time.Time{}, false
	}
	if !t.penalized {
		t = stayAway{until: t.until.Add(penalty), penalized: true}
		s.until[key] = t
	}
	return t.until, true
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
