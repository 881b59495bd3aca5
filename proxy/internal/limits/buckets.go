package limits

import (
	"container/list"
	"hash/maphash"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// buckets holds a token bucket (golang.org/x/time/rate) per key, in memory,
// bounded: at most max keys, the least recently used dropped first. A bucket
// left alone for burst/rate seconds is full again, the same as a new one, so
// dropping it forgets nothing; only a key pushed out while it is still
// refilling (more than max keys busier than it within that time) starts
// afresh with a full burst. The keys are spread over shards, each with its
// own lock and its share of max, so that concurrent requests of different
// clients rarely wait on each other.
type buckets struct {
	limit  rate.Limit
	burst  int
	seed   maphash.Seed
	shards [bucketShards]bucketShard
}

// bucketShards is how many locks the buckets are spread over.
const bucketShards = 16

type bucketShard struct {
	mu   sync.Mutex
	max  int
	keys map[string]*list.Element // of *bucket
	lru  list.List                // most recently used first
}

type bucket struct {
	key string
	lim *rate.Limiter
}

// newBuckets returns buckets of perSecond tokens a second, burst at most, for
// at most most keys (at least one per shard).
func newBuckets(perSecond, burst, most int) *buckets {
	b := &buckets{limit: rate.Limit(perSecond), burst: burst, seed: maphash.MakeSeed()}
	for i := range b.shards {
		b.shards[i].max = max(most/bucketShards, 1)
		b.shards[i].keys = map[string]*list.Element{}
	}
	return b
}

// take takes a token from key's bucket at now; when there is none, it
// returns false and how long until the next one.
func (b *buckets) take(key string, now time.Time) (ok bool, wait time.Duration) {
	s := &b.shards[maphash.String(b.seed, key)%bucketShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	lim := s.get(key, b.limit, b.burst)
	if lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - lim.TokensAt(now)
	return false, time.Duration(missing / float64(b.limit) * float64(time.Second))
}

// get returns key's limiter, made when missing, as the most recently used.
func (s *bucketShard) get(key string, limit rate.Limit, burst int) *rate.Limiter {
	if e, ok := s.keys[key]; ok {
		s.lru.MoveToFront(e)
		return e.Value.(*bucket).lim
	}
	if s.lru.Len() >= s.max {
		old := s.lru.Back()
		s.lru.Remove(old)
		delete(s.keys, old.Value.(*bucket).key)
	}
	lim := rate.NewLimiter(limit, burst)
	s.keys[key] = s.lru.PushFront(&bucket{key: key, lim: lim})
	return lim
}

// len returns the keys held.
func (b *buckets) len() int {
	n := 0
	for i := range b.shards {
		s := &b.shards[i]
		s.mu.Lock()
		n += s.lru.Len()
		s.mu.Unlock()
	}
	return n
}
