package admit

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// BenchmarkReserveAdmitted: reserves admitted by the gate and written by a
// real ledger, from 16 goroutines a CPU (the script and forward batches
// coalesce them), through the admitter without the edge. cpu-us/op is this
// process's CPU (the admitter, its Redis and ledger clients; not the ledger,
// Redis or Postgres) per admitted reserve, from getrusage.
func BenchmarkReserveAdmitted(b *testing.B) {
	k := newKit(b, time.Second)
	code := k.createVoucher(b, 100_000_000)
	var next atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	before := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c := next.Add(1)
			rep, err := k.reserve(code, c, fmt.Sprintf("%s-%d", code, c))
			if err != nil || rep.Status != http.StatusCreated {
				b.Errorf("Reserve(%d) = %v, %v, want 201", c, rep.Status, err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-before).Microseconds())/float64(b.N), "cpu-us/op")
}

// processCPU is the user and system CPU this process has used.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
