package httpxtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// VoucherLock connects to db at once and returns hold, which takes code's
// voucher row (FOR UPDATE), and release: between them the ledger's writes for
// it wait, in flight (ShutdownLoad's Hold and Release).
func VoucherLock(tb testing.TB, db, code string) (hold, release func()) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	require.NoError(tb, err)
	tb.Cleanup(func() { conn.Close(ctx) })
	var tx pgx.Tx
	hold = func() {
		var err error
		tx, err = conn.Begin(ctx)
		require.NoError(tb, err)
		_, err = tx.Exec(ctx, `SELECT 1 FROM voucher WHERE code = $1 FOR UPDATE`, code)
		require.NoError(tb, err)
	}
	release = func() { assert.NoError(tb, tx.Rollback(ctx)) }
	return hold, release
}
