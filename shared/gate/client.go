package gate

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOptions bounds how long a Redis call may take, so that a slow or dead
// Redis turns into a fast error rather than a queue of waiting requests.
type ClientOptions struct {
	Timeout  time.Duration // dial, read and write; default 250ms
	PoolSize int           // default go-redis's (10 per CPU)
}

// NewClient connects to the Redis at url (redis://host:port/db). Context
// deadlines are honoured, so a caller's deadline bounds every call.
func NewClient(url string, o ClientOptions) (redis.UniversalClient, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = 250 * time.Millisecond
	}
	opt.DialTimeout = o.Timeout
	opt.ReadTimeout = o.Timeout
	opt.WriteTimeout = o.Timeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = 1
	if o.PoolSize > 0 {
		opt.PoolSize = o.PoolSize
	}
	return redis.NewClient(opt), nil
}
