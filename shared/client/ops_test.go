package client_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/client"
	"github.com/flashgate/flashgate/shared/events"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestOps: the outbox's feed serves a created voucher's event, a retry of an
// event no sink parked is NOT_FOUND (this stack has no sink), and
// StreamExport writes what ExportReservations reads.
func TestOps(t *testing.T) {
	admin := client.New(stack.LedgerURL, client.WithToken(ledgerToken))
	code := newVoucher(t, admin, 5, 1, false)
	_, err := admin.Reserve(t.Context(), code, voucher.Claim{CustomerID: 7, OrderID: code + "-1", OrderAmount: 5_000})
	require.NoError(t, err)

	var created *events.Event
	require.Eventually(t, func() bool { // served once the watermark passed it (every second without sinks)
		for after := int64(0); ; {
			p, err := admin.Events(t.Context(), after, 500)
			require.NoError(t, err)
			for i, e := range p.Events {
				if e.VoucherCode == code && e.Type == events.VoucherCreated {
					created = &p.Events[i]
					return true
				}
			}
			if len(p.Events) == 0 {
				return false
			}
			after = p.NextAfter
		}
	}, 10*time.Second, 100*time.Millisecond)
	assert.Positive(t, created.ID)

	failed, err := admin.FailedEvents(t.Context(), 0, 0)
	require.NoError(t, err)
	assert.Empty(t, failed.Events, "no sink, nothing parked")
	_, err = admin.RetryEvent(t.Context(), created.ID)
	assert.Equal(t, voucher.CodeNotFound, voucher.ErrorCode(err))

	var whole, streamed bytes.Buffer
	require.NoError(t, admin.ExportReservations(t.Context(), code, &whole))
	n, err := admin.StreamExport(t.Context(), code, &streamed)
	require.NoError(t, err)
	assert.Equal(t, whole.String(), streamed.String())
	assert.Equal(t, int64(streamed.Len()), n)
	assert.Contains(t, streamed.String(), code+"-1,7,RESERVED,5000,")
	_, err = admin.StreamExport(t.Context(), "NO-SUCH-VOUCHER", &streamed)
	assert.Equal(t, voucher.CodeVoucherNotFound, voucher.ErrorCode(err))
}
