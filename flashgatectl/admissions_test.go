package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/voucher"
)

// refuse records a refused admission of order as the ledger's consumer does
// when the database refuses a log voucher's record (the stack has no Kafka).
func refuse(t *testing.T, code, order string, customer, offset int64) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), stack.DatabaseURL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), `INSERT INTO admission_failed (voucher_code, order_id, customer_id, order_amount,
		reason, message, log_partition, log_offset, admitted_at) VALUES ($1, $2, $3, 5000, 'OUT_OF_STOCK',
		'the voucher has no uses left', 0, $4, $5)`, code, order, customer, offset, time.Now())
	require.NoError(t, err)
}

// mine is the failed admissions of code among fs (the list is every test's).
func mine(fs []api.FailedAdmission, code string) map[string]api.FailedAdmission {
	out := map[string]api.FailedAdmission{}
	for _, f := range fs {
		if f.Code == code {
			out[f.OrderID] = f
		}
	}
	return out
}

// TestAdmissions: admissions failed lists the refused admissions (--all the
// resolved too), replay reserves one again and closes it, discard closes
// one, each change asks for --yes without a terminal, and a closed one is
// NOT_FOUND; admissions lag says a ledger without a log has none.
func TestAdmissions(t *testing.T) {
	t.Parallel()
	code := createVoucher(t, false, 10)
	replayed, discarded := code+"-replay", code+"-discard"
	refuse(t, code, replayed, 71, 1)
	refuse(t, code, discarded, 72, 2)

	open := mine(decode[[]api.FailedAdmission](t, requireOK(t, ctl(t, "admissions", "failed", "-o", "json"))), code)
	require.Len(t, open, 2)
	assert.Equal(t, "OUT_OF_STOCK", open[replayed].Reason)
	assert.Equal(t, 1, open[replayed].Failures)
	table := requireOK(t, ctl(t, "admissions", "failed")).stdout
	assert.Regexp(t, `(?m)^VOUCHER\s+ORDER\s+CUSTOMER\s+REASON\s+FAILURES`, table)
	assert.Regexp(t, `(?m)^`+code+`\s+`+discarded+`\s+72\s+OUT_OF_STOCK\s+1\s`, table)

	assert.Equal(t, exitUsage, ctl(t, "admissions", "replay", code, replayed).code, "a change without --yes and no terminal")
	r := decode[api.Receipt](t, requireOK(t, ctl(t, "admissions", "replay", code, replayed, "--yes", "-o", "json")))
	assert.Equal(t, replayed, r.OrderID)
	assert.EqualValues(t, 5_000, r.DiscountAmount, "the discount, at most the order amount")
	f := decode[api.FailedAdmission](t, requireOK(t, ctl(t, "admissions", "discard", code, discarded, "--yes", "-o", "json")))
	require.NotNil(t, f.Resolution)
	assert.Equal(t, "discarded", *f.Resolution)
	assert.Equal(t, exitRefused, ctl(t, "admissions", "discard", code, discarded, "--yes").code, "discard again")

	assert.Empty(t, mine(decode[[]api.FailedAdmission](t, requireOK(t, ctl(t, "admissions", "failed", "-o", "json"))), code))
	all := mine(decode[[]api.FailedAdmission](t, requireOK(t, ctl(t, "admissions", "failed", "--all", "-o", "json"))), code)
	require.Len(t, all, 2)
	require.NotNil(t, all[replayed].Resolution)
	assert.Equal(t, "replayed", *all[replayed].Resolution)
	c := client.New(stack.LedgerURL, client.WithToken(ledgerToken))
	rec, err := c.Get(t.Context(), code, replayed)
	require.NoError(t, err, "the replayed order's reservation")
	assert.Equal(t, voucher.Reserved, rec.Status)

	lag := decode[api.AdmissionsLag](t, requireOK(t, ctl(t, "admissions", "lag", "-o", "json")))
	assert.False(t, lag.Log, "the stack's ledger has no admissions log")
	assert.Contains(t, requireOK(t, ctl(t, "admissions", "lag")).stdout, "no admissions log")
}

// TestVouchersGetLogLag: vouchers get shows a log voucher's group lag beside
// its counters, and a sync voucher's without it.
func TestVouchersGetLogLag(t *testing.T) {
	t.Parallel()
	c := client.New(stack.LedgerURL, client.WithToken(ledgerToken))
	code, log := createVoucher(t, true, 10), voucher.WritePathLog
	_, err := c.Pause(t.Context(), code) // writePath changes on a voucher that is not live
	require.NoError(t, err)
	_, err = c.UpdateVoucher(t.Context(), code, voucher.VoucherPatch{WritePath: &log})
	require.NoError(t, err)
	out := requireOK(t, ctl(t, "vouchers", "get", code)).stdout
	assert.Regexp(t, `(?m)^remaining\s+10$`, out)
	assert.Regexp(t, `(?m)^logLag\s+no admissions log on this ledger$`, out)
	sync := createVoucher(t, false, 10)
	assert.False(t, strings.Contains(requireOK(t, ctl(t, "vouchers", "get", sync)).stdout, "logLag"))
}
