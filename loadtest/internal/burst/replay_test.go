package burst

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/stack"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// TestTrafficFile writes a plan as a traffic file and reads it back at 2x:
// the same customers, amounts and retries (an orderId sent twice is one
// order), in the order sent, at half the recorded times.
func TestTrafficFile(t *testing.T) {
	plan := load.Plan{Orders: []load.Order{{ID: "C-0", Customer: 1, Amount: 0}, {ID: "C-1", Customer: 2, Amount: 900}, {ID: "C-2", Customer: 1, Amount: 0}}, Requests: []int32{0, 1, 0, 2}, Retries: 1}
	t0 := time.Now()
	shots := []load.Shot{{Req: 0, At: t0}, {Req: 1, At: t0.Add(100 * time.Millisecond)}, {Req: 2, At: t0.Add(300 * time.Millisecond)}, {Req: -1}}
	path := filepath.Join(t.TempDir(), "traffic.jsonl")
	require.NoError(t, writeTraffic(path, "C", plan, shots, 10))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, `{"t":0,"code":"C","customerId":1,"orderId":"C-0","orderAmount":750000}`, strings.SplitN(string(raw), "\n", 2)[0])

	rp, err := readTraffic(bytes.NewReader(raw), 2)
	require.NoError(t, err)
	got := rp.planFor("R")
	assert.Equal(t, load.Plan{Orders: []load.Order{{ID: "R-0", Customer: 1, Amount: 750000}, {ID: "R-1", Customer: 2, Amount: 900}, {ID: "R-2", Customer: 1, Amount: 750000}}, Requests: []int32{0, 1, 0, 2}, Retries: 1}, got)
	// The fourth request got no answer: it is recorded at 3/rate = 0.3 s.
	assert.Equal(t, []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond}, rp.At)

	for _, bad := range []string{
		`{"t":0,"code":"A","customerId":1,"orderId":"o","orderAmount":1}` + "\n" + `{"t":1,"code":"B","customerId":1,"orderId":"p","orderAmount":1}`,
		`{"t":0,"code":"A","customerId":0,"orderId":"o","orderAmount":1}`,
		`{"t":0,"code":"A","customerId":1,"orderId":"o","orderAmount":1,"extra":true}`,
		``,
	} {
		_, err := readTraffic(strings.NewReader(bad), 1)
		assert.Error(t, err, "%q", bad)
	}
	_, err = readTraffic(bytes.NewReader(raw), 0)
	assert.Error(t, err, "speed 0")
}

// TestRecordAndReplay records a real burst's traffic, replays the file at 2x
// on a fresh voucher of the same stack with the same checks, and reads both
// runs' vegeta results back with vegeta's own decoder and metrics.
func TestRecordAndReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	st, err := stack.Start(stack.Options{BinDir: buildServices(t), Token: "test-token",
		ExternalDB: devstacktest.PostgresURL(t), ExternalRDB: devstacktest.RedisURL(t), ServiceLog: io.Discard})
	require.NoError(t, err)
	t.Cleanup(st.Stop)
	b, err := verify.OpenBench(t.Context(), st.Endpoints())
	require.NoError(t, err)
	t.Cleanup(b.Close)
	dir := t.TempDir()

	cfg := Config{Label: "rec", Rate: 400, Duration: time.Second, Stock: 100, PerUser: 1, Customers: 300,
		Retry: 0.2, Flash: true, Seed: 7, Attack: load.DefaultAttack,
		Record: filepath.Join(dir, "traffic.jsonl"), Results: filepath.Join(dir, "burst.bin")}
	s, err := Send(t.Context(), b, cfg)
	require.NoError(t, err)
	require.True(t, s.Pass, "%+v", s.Checks)
	assert.Equal(t, cfg.Requests(), vegetaCount(t, cfg.Results), "every answer in vegeta's results")

	f, err := os.Open(cfg.Record)
	require.NoError(t, err)
	rp, err := readTraffic(f, 2)
	f.Close()
	require.NoError(t, err)
	require.Len(t, rp.At, cfg.Requests())
	assert.InDelta(t, 0.5, rp.At[len(rp.At)-1].Seconds(), 0.25, "1 s of traffic at 2x")

	rcfg := Config{Label: "replay", Stock: 100, PerUser: 1, Flash: true, Attack: load.DefaultAttack, Replay: &rp,
		Duration: rp.At[len(rp.At)-1], Rate: float64(len(rp.At)) / rp.At[len(rp.At)-1].Seconds(),
		Results: filepath.Join(dir, "replay.bin")}
	r, err := Send(t.Context(), b, rcfg)
	require.NoError(t, err)
	for _, c := range r.Checks {
		assert.True(t, c.Pass, "%s: %s", c.Name, c.Detail)
	}
	assert.Equal(t, s.Requests, r.Requests)
	assert.Equal(t, s.Orders, r.Orders)
	assert.Equal(t, s.Retries, r.Retries)
	assert.Equal(t, s.DistinctCustomers, r.DistinctCustomers)
	assert.Equal(t, s.Expected, r.Expected, "the same demand on the same stock")
	assert.Equal(t, r.Requests, vegetaCount(t, rcfg.Results))

	// The command as an operator runs it against a running stack: its report
	// directory holds vegeta's results.
	e := st.Endpoints()
	out := filepath.Join(dir, "cmd")
	require.NoError(t, RunReplay(t.Context(), []string{"--target", e.ProxyURL, "--ledger", e.LedgerURL,
		"--database-url", e.DBURL, "--redis-url", e.RedisURL, "--token", e.Token,
		"--stock", "100", "--speed", "4", "--out", out, cfg.Record}))
	assert.Equal(t, cfg.Requests(), vegetaCount(t, filepath.Join(out, "results.bin")))
	_, err = os.Stat(filepath.Join(out, "report.html"))
	assert.NoError(t, err)
}

// vegetaCount decodes a results file as `vegeta report` does and returns how
// many results vegeta's metrics counted.
func vegetaCount(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	dec := vegeta.NewDecoder(f)
	var m vegeta.Metrics
	for {
		var r vegeta.Result
		if err := dec.Decode(&r); err != nil {
			break
		}
		m.Add(&r)
	}
	m.Close()
	return int(m.Requests)
}

// TestRunRefusesAPortTaken runs `loadtest run` with its proxy's port held by
// another process that answers /healthz: the proxy cannot bind and exits, so
// the command must fail with the proxy's log, never say "flashgate is up".
func TestRunRefusesAPortTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	bin, loadtest := buildServices(t), filepath.Join(devstacktest.Binaries(t, "../.."), "loadtest")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	impostor := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"ok","pid":1}`))
	})}
	go impostor.Serve(taken)
	t.Cleanup(func() { impostor.Close() })
	ledgerPort, err := devstack.FreePort()
	require.NoError(t, err)

	cmd := exec.Command(loadtest, "run", "--bin", bin,
		"--database-url", devstacktest.PostgresURL(t), "--redis-url", devstacktest.RedisURL(t),
		"--proxy-addr", taken.Addr().String(), "--ledger-addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(ledgerPort)))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("loadtest run still running with its port taken:\n%s", out.String())
	}
	assert.Error(t, err, "exit status")
	assert.NotContains(t, out.String(), "flashgate is up")
	assert.Contains(t, out.String(), "address already in use", "the proxy's log says why")
}
