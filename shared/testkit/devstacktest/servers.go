// Package devstacktest gives tests the servers of package devstack: one redis-server and
// one PostgreSQL shared by a test binary (or $REDIS_URL and $DATABASE_URL when set),
// dedicated servers a test may kill and restart, and the project's binaries built once.
//
// It is apart from devstack so that the demo and the load harness, which start servers
// with devstack, do not link package testing.
package devstacktest

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
)

// sharedServer is a server started at most once per test binary and stopped by RunTests.
// A failed start is remembered so that every later test fails fast with the same error.
type sharedServer[T interface {
	Stop() error
	URL() string
}] struct {
	mu     sync.Mutex
	server T
	url    string
	err    error
}

// URL returns $env, or the URL of the shared server, which start starts on first use.
// what names the server when it fails to start.
func (s *sharedServer[T]) URL(tb testing.TB, env, what string, start func() (T, error)) string {
	tb.Helper()
	if url := os.Getenv(env); url != "" {
		return url
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.url == "" && s.err == nil {
		srv, err := start()
		if err != nil {
			s.err = err
		} else {
			s.server, s.url = srv, srv.URL()
		}
	}
	if s.err != nil {
		tb.Fatalf("devstack: no %s set and starting %s failed: %v", env, what, s.err)
	}
	return s.url
}

func (s *sharedServer[T]) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.url != "" {
		_ = s.server.Stop() // the test binary is exiting; Pdeathsig covers a stuck server
	}
	var zero T
	s.server, s.url, s.err = zero, "", nil
}

var (
	sharedRedis    sharedServer[*devstack.Redis]
	sharedPostgres sharedServer[*devstack.Postgres]
)

// RedisURL returns $REDIS_URL, or the URL of a redis-server shared by this test binary.
// Tests sharing it must use their own keys. Use RunTests in TestMain so it is stopped.
func RedisURL(tb testing.TB) string {
	tb.Helper()
	return sharedRedis.URL(tb, "REDIS_URL", "a redis-server", func() (*devstack.Redis, error) {
		return devstack.StartRedis(devstack.RedisOptions{})
	})
}

// PostgresURL returns $DATABASE_URL, or the URL of a PostgreSQL shared by this test
// binary. Tests sharing it must use their own rows. Use RunTests in TestMain so it is
// stopped.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	return sharedPostgres.URL(tb, "DATABASE_URL", "PostgreSQL", func() (*devstack.Postgres, error) {
		return devstack.StartPostgres(devstack.PostgresOptions{})
	})
}

// NewRedis starts a dedicated redis-server that the test may stop, kill and restart. It
// is stopped when the test ends.
func NewRedis(tb testing.TB, opts devstack.RedisOptions) *devstack.Redis {
	tb.Helper()
	r, err := devstack.StartRedis(opts)
	return stopAtCleanup(tb, r, err)
}

// NewPostgres starts a dedicated PostgreSQL that the test may stop, kill and restart. It
// is stopped when the test ends.
func NewPostgres(tb testing.TB, opts devstack.PostgresOptions) *devstack.Postgres {
	tb.Helper()
	p, err := devstack.StartPostgres(opts)
	return stopAtCleanup(tb, p, err)
}

// NewRedisCluster starts a dedicated cluster that tb.Cleanup stops.
func NewRedisCluster(tb testing.TB, opts devstack.ClusterOptions) *devstack.Cluster {
	tb.Helper()
	c, err := devstack.StartRedisCluster(opts)
	if err != nil {
		tb.Fatalf("devstack: %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// stopAtCleanup fails the test if the server did not start, and stops it when the test
// ends.
func stopAtCleanup[S interface{ Stop() error }](tb testing.TB, server S, err error) S {
	tb.Helper()
	if err != nil {
		tb.Fatalf("devstack: %v", err)
	}
	tb.Cleanup(func() {
		if err := server.Stop(); err != nil {
			tb.Logf("devstack: %v", err)
		}
	})
	return server
}

// RunTests runs m and then stops the servers shared by the test binary, removes what
// Binaries built, and the directory of ServiceLog files when no failed test kept one. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(devstacktest.RunTests(m)) }
//
// go-redis' own log lines (the failed dials of the test's clients while a test
// stops or kills Redis on purpose) are dropped: they went to the test output,
// where they buried the failure; the services' lines go to ServiceLog files.
func RunTests(m *testing.M) int {
	redis.SetLogger(quietRedis{})
	code := m.Run()
	sharedRedis.stop()
	sharedPostgres.stop()
	removeBinaries()
	removeServiceLogRoot()
	return code
}

// quietRedis is a go-redis logger that drops every line.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
