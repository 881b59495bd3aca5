package agreementtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/agreement"
)

// Checks is what a test stack around a ledger process checks when its test
// ends (Redis agrees with Postgres on its own): every flash voucher the test created agrees
// between Redis and the database, and the ledger, whose reconciler is off
// (RECONCILE_INTERVAL=1h; its reconcile of what a restarted Redis inherited
// still runs every second),
// repaired nothing: its /metrics counts no repair and the audit holds none for
// these vouchers. The zero Checks is ready; it is safe for concurrent use.
type Checks struct {
	mu       sync.Mutex
	flash    []string
	repairOK string // why repairs are expected; empty: a repair fails the test
	done     bool   // checked already, or nothing to check (Skip)
}

// Track adds a flash voucher to the checks at the end of the test.
func (c *Checks) Track(code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flash = append(c.flash, code)
}

// AllowRepairs is for a test that destroys Redis' data on purpose: a repair is
// then expected, and only agreement after the recovery is checked. why says
// what the test destroys.
func (c *Checks) AllowRepairs(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.repairOK = why
}

// RepairsAllowed is why repairs are expected; empty when they are not.
func (c *Checks) RepairsAllowed() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.repairOK
}

// Skip is for a test with nothing left to agree (Redis killed and never
// restarted), or one that ran the checks itself: why says which.
func (c *Checks) Skip(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
}

// Run runs the checks once (later calls do nothing): agreement of every
// tracked voucher, then, unless repairs are allowed, no repair in the
// ledger's metrics (metricsURL, its /metrics) nor in the audit. Call it while
// the ledger still serves.
func (c *Checks) Run(tb testing.TB, rdb redis.UniversalClient, db agreement.Querier, metricsURL string) {
	tb.Helper()
	c.mu.Lock()
	codes, repairOK, done := append([]string(nil), c.flash...), c.repairOK, c.done
	c.done = true
	c.mu.Unlock()
	if len(codes) == 0 || done {
		return
	}
	RequireAgreement(tb, rdb, db, codes...)
	if repairOK != "" {
		return
	}
	RequireNoRepairMetrics(tb, metricsURL)
	RequireNoRepairAudited(tb, db, codes...)
}

// AtEnd checks codes when tb ends, as Checks.Run does, on clients of its own
// to a running stack's Redis and database; ledgerURL is the ledger whose
// /metrics must count no repair (its reconciler off).
func AtEnd(tb testing.TB, redisURL, databaseURL, ledgerURL string, codes ...string) {
	tb.Helper()
	opts, err := redis.ParseURL(redisURL)
	require.NoError(tb, err)
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { rdb.Close() })
	pool, err := pgxpool.New(context.Background(), databaseURL)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	tb.Cleanup(func() {
		RequireAgreement(tb, rdb, pool, codes...)
		RequireNoRepairMetrics(tb, ledgerURL+"/metrics")
		RequireNoRepairAudited(tb, pool, codes...)
	})
}
