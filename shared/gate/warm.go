package gate

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// scripts are every script the gate runs, for Warm.
var scripts = []*redis.Script{reserveScript, releaseScript, loadScript, metaScript, stateScript,
	reconcileScript, reconcileScanScript, reconcileEndScript,
	unloadScript, holdScript, updateScript, reassertScript, generationScript, holderScript,
	promiseScript, orderScript, limitScript, parkedScript}

// Warm opens conns connections to Redis at once (conns PINGs in parallel, so
// that the pool holds them: go-redis keeps an idle connection 30 minutes) and loads
// every script into Redis's cache: the first requests of a sale then find a
// connection and EVALSHA succeeds, instead of dialing and falling back to EVAL
// under the burst. Warm(ctx, rdb, 0) only loads the scripts.
func Warm(ctx context.Context, rdb redis.UniversalClient, conns int) error {
	g, ctx := errgroup.WithContext(ctx)
	for range conns {
		g.Go(func() error { return rdb.Ping(ctx).Err() })
	}
	for _, s := range scripts {
		g.Go(func() error { return s.Load(ctx, rdb).Err() })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("warm redis: %w", err)
	}
	return nil
}
