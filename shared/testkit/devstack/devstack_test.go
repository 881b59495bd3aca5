package devstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// serviceAddrEnv makes the test binary act as the service under test in
// TestStartService instead of running tests.
const serviceAddrEnv = "DEVSTACK_TEST_SERVICE_ADDR"

func TestMain(m *testing.M) {
	if addr := os.Getenv(serviceAddrEnv); addr != "" {
		os.Exit(serveHealth(addr))
	}
	os.Exit(m.Run())
}

// serveHealth is the tiny service TestStartService runs: it answers /healthz until
// SIGTERM.
func serveHealth(addr string) int {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"status":"ok","pid":%d}`, os.Getpid())
	})
	srv := &http.Server{Addr: addr, Handler: mux}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	go func() {
		<-stop
		srv.Close()
	}()
	fmt.Println("listening on", addr)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		fmt.Println(err)
		return 1
	}
	fmt.Println("stopped")
	return 0
}

func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func pgConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// newRedis starts a redis-server that is stopped when the test ends. These tests cannot
// use devstacktest, which imports this package.
func newRedis(t *testing.T, opts RedisOptions) *Redis {
	t.Helper()
	r, err := StartRedis(opts)
	return stopAtCleanup(t, r, err)
}

// newPostgres starts a PostgreSQL that is stopped when the test ends.
func newPostgres(t *testing.T, opts PostgresOptions) *Postgres {
	t.Helper()
	p, err := StartPostgres(opts)
	return stopAtCleanup(t, p, err)
}

func stopAtCleanup[S interface{ Stop() error }](t *testing.T, server S, err error) S {
	t.Helper()
	require.NoError(t, err)
	t.Cleanup(func() { server.Stop() })
	return server
}

func TestFreePort(t *testing.T) {
	port, err := FreePort()
	require.NoError(t, err)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err, "FreePort() = %d, which cannot be bound", port)
	l.Close()
}

func TestRedisStartStop(t *testing.T) {
	t.Parallel()
	r := newRedis(t, RedisOptions{})
	require.Equal(t, "redis://"+r.Addr+"/0", r.URL())
	c := redisClient(t, r.URL())
	ctx := t.Context()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)

	pid := r.Pid()
	require.NoError(t, pingRedis(r.Addr, pid), "Pid() = %d, not the server's", pid)

	require.NoError(t, r.Stop())
	require.Zero(t, r.Pid(), "Pid after Stop")
	require.NoDirExists(t, r.Dir())
	require.Error(t, pingRedis(r.Addr, 0), "PING after Stop")
	require.NoError(t, r.Stop(), "second Stop")
	require.Error(t, r.Restart(), "Restart after Stop removed the dir")
}

func TestRedisKeepsGivenDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "redis")
	r, err := StartRedis(RedisOptions{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, r.Stop())
	require.FileExists(t, filepath.Join(dir, "redis.log"))
}

func TestRedisKillRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		aof      bool
		wantKept bool
	}{
		{aof: true, wantKept: true},
		{aof: false, wantKept: false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("aof=%v", tt.aof), func(t *testing.T) {
			t.Parallel()
			r := newRedis(t, RedisOptions{AOF: tt.aof})
			addr := r.Addr
			c := redisClient(t, r.URL())
			ctx := t.Context()
			require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
			// appendfsync everysec: what was written more than a second ago is on disk.
			time.Sleep(1500 * time.Millisecond)

			require.NoError(t, r.Kill())
			require.Error(t, pingRedis(addr, 0), "PING after Kill")
			require.NoError(t, r.Restart())
			require.Equal(t, addr, r.Addr, "Restart moved the server")

			got, err := c.Get(ctx, "k").Result()
			if tt.wantKept {
				require.NoError(t, err)
				require.Equal(t, "v", got)
			} else {
				require.ErrorIs(t, err, redis.Nil)
			}
		})
	}
}

func TestRedisRestartRunning(t *testing.T) {
	t.Parallel()
	r := newRedis(t, RedisOptions{AOF: true})
	c := redisClient(t, r.URL())
	ctx := t.Context()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	// A clean shutdown flushes the append-only file, so no wait is needed.
	require.NoError(t, r.Restart())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", got)
}

func TestRedisPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = StartRedis(RedisOptions{Port: l.Addr().(*net.TCPAddr).Port})
	require.ErrorIs(t, err, errAddrInUse)
	require.ErrorContains(t, err, "redis.log")
}

func TestPostgresRestartKeepsData(t *testing.T) {
	t.Parallel()
	p := newPostgres(t, PostgresOptions{})
	require.Equal(t, "postgres://postgres@"+p.Addr+"/flashgate?sslmode=disable", p.URL())
	ctx := t.Context()

	conn := pgConn(t, p.URL())
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	require.Equal(t, "flashgate", db)
	var fsync string
	require.NoError(t, conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync))
	require.Equal(t, "off", fsync)
	var maxConns string
	require.NoError(t, conn.QueryRow(ctx, "SHOW max_connections").Scan(&maxConns))
	require.Equal(t, "300", maxConns)
	_, err := conn.Exec(ctx, "CREATE TABLE t (n int); INSERT INTO t VALUES (1), (2)")
	require.NoError(t, err)

	require.NoError(t, p.Restart())
	require.NoError(t, p.Kill())
	require.NoError(t, p.Restart())

	conn = pgConn(t, p.URL())
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
	require.Equal(t, 2, n)

	dir := p.DataDir()
	require.DirExists(t, dir)
	require.NoError(t, p.Stop())
	require.NoDirExists(t, dir)
	require.NoError(t, p.Stop(), "second Stop")
}

func TestPostgresKillLosesNoCommit(t *testing.T) {
	t.Parallel()
	p := newPostgres(t, PostgresOptions{})
	ctx := t.Context()
	conn := pgConn(t, p.URL())
	_, err := conn.Exec(ctx, "CREATE TABLE t (n int)")
	require.NoError(t, err)
	for i := range 100 {
		_, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", i)
		require.NoError(t, err)
	}

	require.NoError(t, p.Kill())
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err, "query after Kill")
	require.NoError(t, p.Restart())

	conn = pgConn(t, p.URL())
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n))
	require.Equal(t, 100, n)
}

func TestPostgresDurable(t *testing.T) {
	t.Parallel()
	p := newPostgres(t, PostgresOptions{Durable: true})
	conn := pgConn(t, p.URL())
	var fsync string
	require.NoError(t, conn.QueryRow(t.Context(), "SHOW fsync").Scan(&fsync))
	require.Equal(t, "on", fsync)
}

func TestStartService(t *testing.T) {
	t.Parallel()
	bin, err := os.Executable()
	require.NoError(t, err)
	port, err := FreePort()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	health := "http://" + addr + "/healthz"

	s, err := StartService("helper", bin, []string{serviceAddrEnv + "=" + addr}, health, os.Stderr)
	require.NoError(t, err)
	t.Cleanup(func() { s.Stop() })
	first := get(t, health)

	require.NoError(t, s.Kill())
	_, err = http.Get(health)
	require.Error(t, err, "GET after Kill")

	require.NoError(t, s.Restart())
	require.NotEqual(t, first, get(t, health), "Restart kept the old process")

	require.NoError(t, s.Stop())
	require.Contains(t, s.Logs(), "stopped")
	require.NoError(t, s.Stop(), "second Stop")
}

func TestStartServiceUnhealthy(t *testing.T) {
	t.Parallel()
	bin, err := os.Executable()
	require.NoError(t, err)
	// The helper cannot bind a bad address, so it exits and the error shows
	// its output, and names the file that holds all of it.
	log, err := os.Create(filepath.Join(t.TempDir(), "broken.log"))
	require.NoError(t, err)
	defer log.Close()
	_, err = StartService("broken", bin, []string{serviceAddrEnv + "=bad:address:x"}, "http://127.0.0.1:1/healthz", log)
	require.ErrorContains(t, err, "exited before it was ready")
	require.ErrorContains(t, err, "bad:address:x")
	require.ErrorContains(t, err, "all of it in "+log.Name())
}

// TestStartServicePortTaken checks that a start fails, with the service's
// output, when another process holds its port and answers /healthz there:
// the health check must come from the child itself.
func TestStartServicePortTaken(t *testing.T) {
	t.Parallel()
	bin, err := os.Executable()
	require.NoError(t, err)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	impostor := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"status":"ok","pid":1}`)
	})}
	go impostor.Serve(other)
	t.Cleanup(func() { impostor.Close() })
	addr := other.Addr().String()

	_, err = StartService("taken", bin, []string{serviceAddrEnv + "=" + addr}, "http://"+addr+"/healthz", io.Discard)
	require.ErrorContains(t, err, "exited before it was ready")
	require.ErrorContains(t, err, "address already in use")
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return string(b)
}

// TestClosedPort: a connection to the port is refused, and nobody else can bind it
// until it is released.
func TestClosedPort(t *testing.T) {
	port, release, err := ClosedPort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	_, err = net.Listen("tcp", addr)
	require.Error(t, err, "the port is held")
	release()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err, "released")
	require.NoError(t, l.Close())
}
