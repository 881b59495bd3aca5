package gate

import (
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOptions bounds how long a Redis call may take, so that a slow or dead
// Redis turns into a fast error rather than a queue of waiting requests.
type ClientOptions struct {
	Timeout  time.Duration // dial, read and write; default 250ms
	PoolSize int           // default go-redis's (10 per CPU)
}

// ClusterScheme marks a Redis Cluster URL: redis+cluster://host1:port,host2:port
// (any reachable nodes; the client discovers the rest).
const ClusterScheme = "redis+cluster://"

// NewClient connects to the Redis at url: redis://[user:pass@]host:port/db for
// one server, or redis+cluster://host1:port,host2:port,... for a Redis Cluster.
// Context deadlines are honoured, so a caller's deadline bounds every call.
func NewClient(url string, o ClientOptions) (redis.UniversalClient, error) {
	if o.Timeout <= 0 {
		o.Timeout = 250 * time.Millisecond
	}
	if rest, ok := strings.CutPrefix(url, ClusterScheme); ok {
		return newClusterClient(rest, o)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL must be redis://[user:pass@]host:port/db or %shost:port,...: %w", ClusterScheme, err)
	}
	opt.DialTimeout = o.Timeout
	opt.ReadTimeout = o.Timeout
	opt.WriteTimeout = o.Timeout
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = 1
	opt.DialerRetries = 1 // go-redis dials 5 times 100 ms apart by default: a dead Redis must fail fast
	if o.PoolSize > 0 {
		opt.PoolSize = o.PoolSize
	}
	return redis.NewClient(opt), nil
}

// CheckURL refuses a REDIS_URL that NewClient would refuse, naming it,
// without connecting.
func CheckURL(url string) error {
	c, err := NewClient(url, ClientOptions{})
	if err != nil {
		return err
	}
	return c.Close()
}

// newClusterClient parses "host1:port,host2:port[/]" (an optional user:pass@
// before the first host applies to all).
func newClusterClient(hosts string, o ClientOptions) (redis.UniversalClient, error) {
	hosts = strings.TrimSuffix(hosts, "/")
	opt := &redis.ClusterOptions{
		DialTimeout: o.Timeout, ReadTimeout: o.Timeout, WriteTimeout: o.Timeout,
		ContextTimeoutEnabled: true,
		MaxRedirects:          3,
		DialerRetries:         1,
		PoolSize:              o.PoolSize,
		// go-redis reloads the slot map on MOVED, but not when a dead master
		// refuses connections (redis/go-redis#3979): without a short interval
		// a failed-over slot stays unreachable for the default 60 s.
		ClusterStateReloadInterval: time.Second,
	}
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		user, pass, _ := strings.Cut(hosts[:at], ":")
		opt.Username, opt.Password = user, pass
		hosts = hosts[at+1:]
	}
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			opt.Addrs = append(opt.Addrs, h)
		}
	}
	if len(opt.Addrs) == 0 {
		return nil, fmt.Errorf("REDIS_URL: %s needs at least one host:port", ClusterScheme)
	}
	return redis.NewClusterClient(opt), nil
}
