package sale_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/ledger/internal/sale"
	"github.com/flashgate/flashgate/shared/voucher"
)

// logged is n admissions of code from customers from+1..from+n, orders named
// after round.
func logged(code string, from, n int, round string) sale.Batch {
	b := sale.Batch{Code: code}
	for c := from + 1; c <= from+n; c++ {
		b.Claims = append(b.Claims, voucher.Claim{CustomerID: int64(c), OrderID: fmt.Sprintf("%s-%s-%d", code, round, c), OrderAmount: 5_000})
	}
	return b
}

// TestLogPathBatchOneTransaction: a partition's batch of admissions of
// several vouchers (the consumer's unit) is written in one transaction; a
// redelivery of it writes nothing; when one voucher's guard fires (more
// admissions than uses in the database), the others are still written whole
// and only that voucher's excess is refused.
func TestLogPathBatchOneTransaction(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	codes := logVouchers(l, t, 3, 10)
	batch := []sale.Batch{logged(codes[2], 0, 4, "a"), logged(codes[0], 0, 5, "a"), logged(codes[1], 0, 6, "a")}
	refused, err := l.Ledger.WriteLogged(t.Context(), batch)
	require.NoError(t, err)
	assert.Empty(t, refused)
	assert.Equal(t, 1, transactions(l, t, codes...), "transactions that wrote the batch of three vouchers")
	for i, want := range []int{5, 6, 4} {
		assert.Equal(t, want, l.Counts(t, codes[i]).Used, "used_count of voucher %d", i)
	}

	refused, err = l.Ledger.WriteLogged(t.Context(), batch) // redelivered
	require.NoError(t, err)
	assert.Empty(t, refused)
	assert.Equal(t, 1, transactions(l, t, codes...), "transactions after the redelivery")

	// Voucher 1 has 4 uses left: 7 admissions break its stock guard.
	batch = []sale.Batch{logged(codes[0], 100, 5, "b"), logged(codes[1], 100, 7, "b"), logged(codes[2], 100, 6, "b")}
	refused, err = l.Ledger.WriteLogged(t.Context(), batch)
	require.NoError(t, err)
	require.Len(t, refused, 3, "refusals")
	for _, rf := range refused {
		assert.Equal(t, codes[1], rf.Code)
		assert.Equal(t, voucher.CodeOutOfStock, rf.Reason)
	}
	for i, want := range []int{10, 10, 10} {
		c := l.Counts(t, codes[i])
		assert.Equal(t, want, c.Used, "used_count of voucher %d", i)
		assert.Equal(t, want, c.Rows, "rows of voucher %d", i)
		st := ledgertest.RedisState(t, l.Gate, codes[i])
		assert.EqualValues(t, 0, st.Remaining, "Redis remaining of voucher %d", i)
		assert.Len(t, st.Orders, want, "Redis orders of voucher %d", i)
	}
}

// TestLogPathBatchLockOrder: two batches over the same vouchers, their
// vouchers given in opposite orders (two consumers whose partitions share
// vouchers, as after a change of the partition count), run at the same time
// again and again: each voucher's row is locked in code order, so neither
// waits for the other in a cycle (a deadlock would fail one of them).
func TestLogPathBatchLockOrder(t *testing.T) {
	t.Parallel()
	l := ledgertest.New(t, ledgertest.Options{})
	const rounds, per = 30, 3
	codes := logVouchers(l, t, 4, 2*rounds*per)
	var wg sync.WaitGroup
	for r := range rounds {
		for side := range 2 {
			var batch []sale.Batch
			for i := range codes {
				code := codes[i]
				if side == 1 {
					code = codes[len(codes)-1-i]
				}
				batch = append(batch, logged(code, (2*r+side)*per, per, fmt.Sprintf("r%d-s%d", r, side)))
			}
			wg.Go(func() {
				refused, err := l.Ledger.WriteLogged(context.Background(), batch)
				assert.NoError(t, err, "round %d side %d", r, side)
				assert.Empty(t, refused, "round %d side %d", r, side)
			})
		}
		wg.Wait()
	}
	for _, code := range codes {
		assert.Equal(t, 2*rounds*per, l.Counts(t, code).Used, "used_count of %s", code)
	}
}
