package ledger

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
)

// TestForwardBatchFitsLedgerRoute: the proxy's admitted-write batches stay
// within what the ledger's batch route accepts, in claims and in bytes (the
// longest orderIds and largest numbers a claim may hold).
func TestForwardBatchFitsLedgerRoute(t *testing.T) {
	if maxForwardBatch > api.MaxBatchClaims {
		t.Fatalf("maxForwardBatch = %d, want at most api.MaxBatchClaims = %d", maxForwardBatch, api.MaxBatchClaims)
	}
	claims := make([]map[string]any, maxForwardBatch)
	for i := range claims {
		claims[i] = map[string]any{"customerId": int64(1<<63 - 1), "orderId": string(bytes.Repeat([]byte("o"), 64)),
			"orderAmount": int64(1 << 50)}
	}
	buf, err := json.Marshal(map[string]any{"claims": claims})
	require.NoError(t, err)
	if len(buf) > api.MaxBatchBytes {
		t.Fatalf("a batch of %d claims takes %d bytes, want at most api.MaxBatchBytes = %d", maxForwardBatch, len(buf), api.MaxBatchBytes)
	}
}
