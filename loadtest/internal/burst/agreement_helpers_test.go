package burst

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/loadtest/internal/stack"
)

// agreementClients opens clients of st's Redis and database for the agreement
// check (agreementtest.RequireAgreement) at the end of a burst.
func agreementClients(tb testing.TB, st *stack.Stack) (redis.UniversalClient, *pgxpool.Pool) {
	tb.Helper()
	opts, err := redis.ParseURL(st.RedisURL)
	require.NoError(tb, err)
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { rdb.Close() })
	db, err := pgxpool.New(context.Background(), st.DBURL)
	require.NoError(tb, err)
	tb.Cleanup(db.Close)
	return rdb, db
}
