package systemtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/devstack"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
)

// logLine is one line a service wrote, as its JSON log holds it.
type logLine struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
	Err   string `json:"err"`
	raw   string
}

// startOutput runs bin/name with env only (no variable of the test's own
// environment leaks in) until it exits or ctx ends, and returns its exit code
// (-1: still running at ctx's end, then killed) and every line it wrote on
// stdout and stderr, each of which must be JSON.
func startOutput(tb testing.TB, ctx context.Context, name string, env []string) (int, []logLine) {
	tb.Helper()
	cmd := exec.CommandContext(ctx, serviceBinary(tb, name))
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		code = -1
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		tb.Fatalf("run %s: %v", name, err)
	}
	return code, jsonLines(tb, name, out.String())
}

// jsonLines parses a service's output: every line is one JSON object (go-redis'
// own lines included).
func jsonLines(tb testing.TB, name, out string) []logLine {
	tb.Helper()
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := logLine{raw: sc.Text()}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Level == "" {
			tb.Errorf("%s wrote a line that is not a JSON log line: %q", name, sc.Text())
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// freeAddr returns 127.0.0.1:port of a port nothing listens on.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	port, err := devstack.FreePort()
	require.NoError(tb, err)
	return "127.0.0.1:" + strconv.Itoa(port)
}

// takenAddr returns an address the test itself listens on until it ends.
func takenAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	tb.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestStartupErrors starts each binary with one misconfiguration each and
// checks that it stops with exit 2 and one ERROR line, its last, naming the
// variable and the cause, after only JSON lines, no "listening" line and few
// WARN lines; within a bound that shows no wait that the case does not call for.
func TestStartupErrors(t *testing.T) {
	t.Parallel()
	redisURL, dbURL := devstacktest.RedisURL(t), devstacktest.PostgresURL(t)
	_, ledgerURL := startService(t, "ledger", "LEDGER_ADDR", []string{
		"DATABASE_URL=" + dbURL, "REDIS_URL=" + redisURL, "LEDGER_TOKEN=" + ledgerToken,
		"EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h",
	})
	proxy := func(kv ...string) []string {
		return append([]string{"PROXY_ADDR=" + freeAddr(t), "REDIS_URL=" + redisURL, "LEDGER_URL=" + ledgerURL,
			"LEDGER_TOKEN=" + ledgerToken, devstack.OpenEdge, "WARM_REQUESTS=0", "SHUTDOWN_DELAY=0s"}, kv...)
	}
	ledger := func(kv ...string) []string {
		return append([]string{"LEDGER_ADDR=" + freeAddr(t), "DATABASE_URL=" + dbURL, "REDIS_URL=" + redisURL,
			"LEDGER_TOKEN=" + ledgerToken, "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h", "SHUTDOWN_DELAY=0s"}, kv...)
	}
	deadLedger := "http://" + freeAddr(t)
	for _, tc := range []struct {
		name    string
		service string
		env     []string
		want    []string      // in the ERROR line
		within  time.Duration // the exit comes before this
	}{
		{"proxy LEDGER_URL without a scheme", "proxy", proxy("LEDGER_URL=localhost:8081"),
			[]string{"LEDGER_URL", `"localhost:8081"`, "http://"}, 5 * time.Second},
		{"proxy LEDGER_URL an address", "proxy", proxy("LEDGER_URL=127.0.0.1:8081"),
			[]string{"LEDGER_URL", `"127.0.0.1:8081"`, "http://"}, 5 * time.Second},
		{"proxy ledger refuses connections", "proxy", proxy("LEDGER_URL="+deadLedger, "LEDGER_START_WAIT=2s"),
			[]string{"LEDGER_URL=" + deadLedger, "connection refused", "LEDGER_START_WAIT"}, 10 * time.Second},
		// The cause is the resolver's ("no such host" here; a machine
		// without DNS times out), so only the variable is checked.
		{"proxy no such ledger host", "proxy", proxy("LEDGER_URL=http://no-such-host.invalid:8081", "LEDGER_START_WAIT=1s"),
			[]string{"LEDGER_URL=http://no-such-host.invalid:8081", "LEDGER_START_WAIT"}, 10 * time.Second},
		{"proxy wrong LEDGER_TOKEN", "proxy", proxy("LEDGER_TOKEN=not-the-token"),
			[]string{"LEDGER_TOKEN", "refused", "401", "LEDGER_URL=" + ledgerURL}, 5 * time.Second},
		{"proxy PROXY_ADDR nonsense", "proxy", proxy("PROXY_ADDR=nonsense"),
			[]string{"PROXY_ADDR", `"nonsense"`, "host:port"}, 5 * time.Second},
		// The port is checked before the ledger is asked: with no ledger
		// and a long wait, the start still stops at once.
		{"proxy PROXY_ADDR taken", "proxy", proxy("PROXY_ADDR="+takenAddr(t), "LEDGER_URL="+deadLedger, "LEDGER_START_WAIT=1m"),
			[]string{"PROXY_ADDR=127.0.0.1:", "address already in use"}, 5 * time.Second},
		{"proxy METRICS_ADDR taken", "proxy", proxy("METRICS_ADDR="+takenAddr(t), "LEDGER_URL="+deadLedger, "LEDGER_START_WAIT=1m"),
			[]string{"METRICS_ADDR=127.0.0.1:", "address already in use"}, 5 * time.Second},
		{"proxy DEBUG_ADDR taken", "proxy", proxy("DEBUG_ADDR="+takenAddr(t), "LEDGER_URL="+deadLedger, "LEDGER_START_WAIT=1m"),
			[]string{"DEBUG_ADDR=127.0.0.1:", "address already in use"}, 5 * time.Second},
		{"proxy REDIS_URL without a scheme", "proxy", proxy("REDIS_URL=localhost:6379"),
			[]string{"REDIS_URL", "redis://", "scheme"}, 5 * time.Second},
		{"proxy REDIS_URL missing", "proxy", proxy("REDIS_URL="),
			[]string{"REDIS_URL is required"}, 5 * time.Second},
		{"ledger DATABASE_URL refuses connections", "ledger", ledger("DATABASE_URL=postgres://flashgate@" + freeAddr(t) + "/flashgate"),
			[]string{"DATABASE_URL", "connection refused"}, 10 * time.Second},
		{"ledger DATABASE_URL malformed", "ledger", ledger("DATABASE_URL=postgres://x:y@[::1"),
			[]string{"DATABASE_URL"}, 5 * time.Second},
		{"ledger DATABASE_URL missing", "ledger", ledger("DATABASE_URL="),
			[]string{"DATABASE_URL is required"}, 5 * time.Second},
		{"ledger LEDGER_ADDR nonsense", "ledger", ledger("LEDGER_ADDR=nonsense"),
			[]string{"LEDGER_ADDR", `"nonsense"`, "host:port"}, 5 * time.Second},
		// Before the database is contacted: none answers here.
		{"ledger LEDGER_ADDR taken", "ledger", ledger("LEDGER_ADDR="+takenAddr(t), "DATABASE_URL=postgres://flashgate@"+freeAddr(t)+"/flashgate"),
			[]string{"LEDGER_ADDR=127.0.0.1:", "address already in use"}, 5 * time.Second},
		{"ledger DEBUG_ADDR taken", "ledger", ledger("DEBUG_ADDR="+takenAddr(t), "DATABASE_URL=postgres://flashgate@"+freeAddr(t)+"/flashgate"),
			[]string{"DEBUG_ADDR=127.0.0.1:", "address already in use"}, 5 * time.Second},
		{"ledger METRICS_ADDR taken", "ledger", ledger("METRICS_ADDR=" + takenAddr(t)),
			[]string{"METRICS_ADDR=127.0.0.1:", "address already in use"}, 10 * time.Second},
		{"ledger REDIS_URL without a scheme", "ledger", ledger("REDIS_URL=127.0.0.1:6379"),
			[]string{"REDIS_URL", "redis://"}, 5 * time.Second},
		// Fail closed: no token and no LEDGER_AUTH=off is a refusal, as on the edge.
		{"ledger without a token", "ledger", ledger("LEDGER_TOKEN="),
			[]string{"LEDGER_TOKEN or LEDGER_TOKENS is required", "LEDGER_AUTH=off"}, 5 * time.Second},
		{"ledger LEDGER_AUTH=off beside a token", "ledger", ledger("LEDGER_AUTH=off"),
			[]string{"LEDGER_AUTH=off and LEDGER_TOKEN or LEDGER_TOKENS are both set"}, 5 * time.Second},
		{"ledger DEBUG_ADDR not loopback", "ledger", ledger("DEBUG_ADDR=0.0.0.0:0"),
			[]string{"DEBUG_ADDR=0.0.0.0:0", "loopback"}, 5 * time.Second},
		{"proxy DEBUG_ADDR not loopback", "proxy", proxy("DEBUG_ADDR=:0", "LEDGER_URL="+deadLedger, "LEDGER_START_WAIT=1m"),
			[]string{"DEBUG_ADDR=:0", "loopback"}, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.within)
			defer cancel()
			code, lines := startOutput(t, ctx, tc.service, tc.env)
			if code != 2 {
				t.Fatalf("%s exit code = %d, want 2 (-1: still running after %s); output:\n%s", tc.service, code, tc.within, raw(lines))
			}
			require.NotEmpty(t, lines)
			last := lines[len(lines)-1]
			if last.Level != "ERROR" || last.Msg != "bad configuration" {
				t.Fatalf("last line = %s, want the ERROR line bad configuration", last.raw)
			}
			for _, w := range tc.want {
				if !strings.Contains(last.Err, w) {
					t.Errorf("error %q does not say %q", last.Err, w)
				}
			}
			// The proxy's words for a client never reach a start-up message,
			// nor a secret (the wrong token, the malformed URL's password).
			for _, never := range []string{"orderId", "circuit breaker", "UNAVAILABLE", "not-the-token", ":y@"} {
				if strings.Contains(last.Err, never) {
					t.Errorf("error %q says %q", last.Err, never)
				}
			}
			warns := 0
			for _, l := range lines[:len(lines)-1] {
				switch {
				case l.Level == "ERROR":
					t.Errorf("a second ERROR line: %s", l.raw)
				case l.Level == "WARN":
					warns++
				case strings.Contains(l.Msg, "listening") || strings.Contains(l.Msg, "stopped"):
					t.Errorf("%q before the error: %s", l.Msg, l.raw)
				}
			}
			if warns > 2 { // one per 5 s of waiting for a ledger, at most
				t.Errorf("%d WARN lines before the error, want at most 2:\n%s", warns, raw(lines))
			}
		})
	}
}

// TestStartWithoutRedis starts each service with a Redis that refuses
// connections: it starts anyway (flash reserves answer 503 until Redis is
// back) and says so in one WARN line naming REDIS_URL and the cause, with
// go-redis' own lines in the JSON log (at debug: the warm-up's line is the
// fault's), and no line saying Redis is warm.
func TestStartWithoutRedis(t *testing.T) {
	t.Parallel()
	deadRedis := "redis://" + freeAddr(t)
	// A database of its own: the shared one holds other tests' flash
	// vouchers, whose warm-up without Redis logs an ERROR each.
	pg := devstacktest.NewPostgres(t, devstack.PostgresOptions{})
	ledger, ledgerURL := startService(t, "ledger", "LEDGER_ADDR", []string{
		"DATABASE_URL=" + pg.URL(), "REDIS_URL=" + deadRedis, "LEDGER_TOKEN=" + ledgerToken,
		"EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h",
	})
	proxyEnv := []string{"PROXY_ADDR=" + freeAddr(t), "REDIS_URL=" + deadRedis, "LEDGER_URL=" + ledgerURL,
		"LEDGER_TOKEN=" + ledgerToken, devstack.OpenEdge, "WARM_REQUESTS=0", "SHUTDOWN_DELAY=0s",
		"LOG_LEVEL=debug"} // go-redis' failed dials too, each a JSON line
	// The proxy runs until the context ends: by then its warm-up has failed.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	code, lines := startOutput(t, ctx, "proxy", proxyEnv)
	require.Equal(t, -1, code, "the proxy stopped without Redis:\n%s", raw(lines))
	checkRedisWarning(t, "proxy", lines)
	if !strings.Contains(raw(lines), `"source":"go-redis"`) {
		t.Errorf("no go-redis line at LOG_LEVEL=debug:\n%s", raw(lines))
	}

	require.Eventually(t, func() bool { return strings.Contains(ledger.Logs(), "redis warm-up failed") }, 10*time.Second, 100*time.Millisecond)
	checkRedisWarning(t, "ledger", jsonLines(t, "ledger", ledger.Logs()))
}

// TestProxyWaitsForItsLedger starts a proxy before its ledger, as a
// deployment that starts both together does: it waits (one WARN line per
// 5 s, not one per attempt) and serves once the ledger answers.
func TestProxyWaitsForItsLedger(t *testing.T) {
	t.Parallel()
	ledgerAddr, proxyAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		code  int
		lines []logLine
	}
	serviceBinary(t, "proxy") // built here: the goroutine below must not fail the test
	done := make(chan result, 1)
	go func() {
		code, lines := startOutput(t, ctx, "proxy", []string{"PROXY_ADDR=" + proxyAddr, "REDIS_URL=" + devstacktest.RedisURL(t),
			"LEDGER_URL=http://" + ledgerAddr, "LEDGER_TOKEN=" + ledgerToken, devstack.OpenEdge, "WARM_REQUESTS=0"})
		done <- result{code, lines}
	}()
	time.Sleep(2 * time.Second) // the proxy asks a port nothing listens on
	ledger, err := devstack.StartService("ledger", serviceBinary(t, "ledger"), []string{
		"LEDGER_ADDR=" + ledgerAddr, "DATABASE_URL=" + devstacktest.PostgresURL(t), "REDIS_URL=" + devstacktest.RedisURL(t),
		"LEDGER_TOKEN=" + ledgerToken, "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h", "SHUTDOWN_DELAY=0s",
	}, "http://"+ledgerAddr+"/healthz", devstacktest.ServiceLog(t, "ledger"))
	require.NoError(t, err)
	t.Cleanup(func() { ledger.Stop() })
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", proxyAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 15*time.Second, 50*time.Millisecond, "the proxy never listened once its ledger answered")
	cancel()
	r := <-done
	warns := 0
	for _, l := range r.lines {
		if strings.HasPrefix(l.Msg, "waiting for the ledger") {
			warns++
		}
	}
	if warns < 1 || warns > 2 {
		t.Errorf("%d lines waiting for the ledger in about 2s, want 1 (2 at most):\n%s", warns, raw(r.lines))
	}
}

// checkRedisWarning checks a service's log after a start with Redis refusing
// connections: one warm-up failure naming REDIS_URL and its cause, no line
// that calls Redis warm, and the service listening.
func checkRedisWarning(tb testing.TB, service string, lines []logLine) {
	tb.Helper()
	failed, listening := 0, false
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l.Msg, "redis warm-up failed"):
			failed++
			if !strings.Contains(l.Msg, "REDIS_URL") || !strings.Contains(l.Err, "connection refused") {
				tb.Errorf("%s: %s, want REDIS_URL and connection refused", service, l.raw)
			}
		case strings.Contains(l.Msg, "connections warm") && strings.Contains(l.raw, "redis"):
			tb.Errorf("%s: %s after Redis refused every connection", service, l.raw)
		case strings.Contains(l.Msg, "listening"):
			listening = true
		case l.Level == "ERROR":
			tb.Errorf("%s: %s", service, l.raw)
		}
	}
	if failed != 1 || !listening {
		tb.Errorf("%s: %d redis warm-up failures (want 1), listening %v:\n%s", service, failed, listening, raw(lines))
	}
}

func raw(lines []logLine) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.raw + "\n")
	}
	return b.String()
}

// TestLoadtestCommandLine checks bin/loadtest's --help (stdout, exit 0),
// --version (stdout, exit 0) and an unknown command (stderr, exit 2).
func TestLoadtestCommandLine(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(devstacktest.Binaries(t, "../loadtest"), "loadtest")
	for _, tc := range []struct {
		arg        string
		code       int
		out, inErr string
	}{
		{"--help", 0, "usage: loadtest <command>", ""},
		{"-h", 0, "usage: loadtest <command>", ""},
		{"--version", 0, "loadtest ", ""},
		{"nonsense", 2, "", `unknown command "nonsense"`},
	} {
		cmd := exec.Command(bin, tc.arg)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err)
		}
		if code != tc.code || !strings.HasPrefix(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.inErr) ||
			(tc.inErr == "" && stderr.Len() > 0) {
			t.Errorf("loadtest %s = exit %d, stdout %q, stderr %q; want exit %d, stdout starting %q, stderr holding %q",
				tc.arg, code, firstLine(stdout.String()), stderr.String(), tc.code, tc.out, tc.inErr)
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
