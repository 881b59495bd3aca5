package client_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/agreement/agreementtest"
)

// requireAgreementAtEnd checks, when t ends, that the stack's Redis and
// database agree about the flash voucher code and that the stack's ledger,
// whose reconciler is off (RECONCILE_INTERVAL=1h), repaired nothing (issue 22,
// Redis agrees with Postgres on its own). The ledger's counters cover the whole package run,
// so a repair fails every later test too; the audit names the voucher.
func requireAgreementAtEnd(t *testing.T, code string) {
	t.Helper()
	opts, err := redis.ParseURL(stack.RedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	pool, err := pgxpool.New(context.Background(), stack.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(func() {
		agreementtest.RequireAgreement(t, rdb, pool, code)
		agreementtest.RequireNoRepairMetrics(t, stack.LedgerURL+"/metrics")
		agreementtest.RequireNoRepairAudited(t, pool, code)
	})
}
