package admit

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdmittedTogetherWrittenTogether: the claims one script call admits go to
// the ledger together, so that the ledger's batch route gets at most one
// request per script call; each request still gets its own answer. Handed to
// the ledger one request at a time, they took the forward lanes in turn, and a
// script call's claims cost a request to the ledger on each lane.
func TestAdmittedTogetherWrittenTogether(t *testing.T) {
	t.Parallel()
	k := newKit(t, time.Second)
	code := k.createVoucher(t, 10_000)
	require.Equal(t, "201", status(k.reserve(code, 1, code+"-first")))
	calls, requests := k.scriptCalls(t), k.batchRequests(t)
	claims := 0
	// Until some script calls carried several claims (on a loaded machine a
	// round may run one claim at a time).
	for round := 0; round < 20 && (claims == 0 || k.scriptCalls(t)-calls >= claims-1); round++ {
		const n = 16
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			customer := int64(1000*round + i + 2)
			go func() {
				defer wg.Done()
				rep, err := k.reserve(code, customer, fmt.Sprintf("%s-%d", code, customer))
				assert.Equal(t, "201", status(rep, err), "Reserve(%d) = %v, %v, want 201", customer, rep, err)
			}()
		}
		wg.Wait()
		claims += n
	}
	gotCalls, gotRequests := k.scriptCalls(t)-calls, k.batchRequests(t)-requests
	require.Less(t, gotCalls, claims, "no script call carried two claims: nothing to check")
	assert.LessOrEqual(t, gotRequests, gotCalls,
		"%d claims in %d script calls took %d requests to the ledger's batch route, want at most one a call", claims, gotCalls, gotRequests)
}

// scriptCalls is how many coalesced script calls the kit's admitter made.
func (k *kit) scriptCalls(tb testing.TB) int {
	tb.Helper()
	var m dto.Metric
	require.NoError(tb, k.a.metrics.batchSize.Write(&m))
	return int(m.GetHistogram().GetSampleCount())
}

// batchRequests is how many requests the kit's ledger answered on its batch
// route of admitted writes.
func (k *kit) batchRequests(tb testing.TB) int {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, k.ledgerURL+"/metrics", nil)
	require.NoError(tb, err)
	req.Header.Set("Authorization", "Bearer test-token")
	resp, err := client.Do(req)
	require.NoError(tb, err)
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "flashgate_http_request_duration_seconds_count{") &&
			strings.Contains(line, `route="/internal/vouchers/:code/reservations/batch"`) {
			v, err := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
			require.NoError(tb, err, line)
			n += v
		}
	}
	require.NoError(tb, sc.Err())
	return n
}
