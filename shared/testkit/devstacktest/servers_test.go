package devstacktest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { os.Exit(RunTests(m)) }

func TestURLsFromEnv(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://elsewhere:6380/2")
	t.Setenv("DATABASE_URL", "postgres://u@elsewhere:5433/db")
	require.Equal(t, "redis://elsewhere:6380/2", RedisURL(t))
	require.Equal(t, "postgres://u@elsewhere:5433/db", PostgresURL(t))
}

func TestSharedServers(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("DATABASE_URL", "")

	url := RedisURL(t)
	require.Equal(t, url, RedisURL(t), "second RedisURL started another server")
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	require.NoError(t, rdb.Ping(t.Context()).Err())

	url = PostgresURL(t)
	require.Equal(t, url, PostgresURL(t), "second PostgresURL started another server")
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, conn.Ping(t.Context()))
}
