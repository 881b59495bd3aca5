package compare

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// wrk is compare's light generator: a C event loop that spends a few
// microseconds of CPU per request where vegeta spends 70-90, so that on a
// machine whose CPUs the generator shares with the stack the ratios between
// paths are those a user comparing flashgate with a bare server sees. It is a
// closed model (each connection sends its next request when the answer came),
// so it measures a path's maximum; the rate-limited run (a delay between a
// connection's requests) approximates a fixed rate below it. vegeta stays for
// the open-model bursts.

// WrkRun is one wrk run as compare reports it.
type WrkRun struct {
	Connections int     `json:"connections"`
	DelayMs     int     `json:"delayMs,omitempty"` // per connection between requests; 0: flat out
	Rate        float64 `json:"rate"`              // requests per second answered
	P50Ms       float64 `json:"p50Ms"`
	P99Ms       float64 `json:"p99Ms"`
	Requests    int64   `json:"requests"`
	Non2xx      int64   `json:"non2xx"`
	SocketErrs  int64   `json:"socketErrors"`

	cpu time.Duration // wrk's own CPU time (user + system), from its exit
}

// wrkInstalled reports whether wrk is in PATH (scripts/deps.sh installs it).
func wrkInstalled() bool {
	_, err := exec.LookPath("wrk")
	return err == nil
}

// wrkScript is the Lua that shapes one path's requests: wrk.method, .path,
// .headers and .body for a constant request, or a request() function.
type wrkScript string

// constantRequest is a script sending body to path on every request.
func constantRequest(path, body string) wrkScript {
	return wrkScript(fmt.Sprintf(`wrk.method = "POST"
wrk.path = %q
wrk.headers["Content-Type"] = "application/json"
wrk.body = %q
`, path, body))
}

// cycledRequests is a script sending bodies[i % len] to path in turn,
// formatted once at start.
func cycledRequests(path string, bodies []string) wrkScript {
	var b strings.Builder
	fmt.Fprintf(&b, "local path = %q\nlocal bodies = {\n", path)
	for _, body := range bodies {
		fmt.Fprintf(&b, "  %q,\n", body)
	}
	b.WriteString(`}
local reqs = {}
local n = 0
init = function(args)
  for i, body in ipairs(bodies) do
    reqs[i] = wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
  end
end
request = function()
  n = n % #reqs + 1
  return reqs[n]
end
`)
	return wrkScript(b.String())
}

// freshOrders is a script sending a new order of a new customer on every
// request: customerId first+1, first+2, ... and orderId prefix<customerId>
// (one wrk thread, so the counter is the whole run's).
func freshOrders(path, prefix string, first int64, amount int64) wrkScript {
	return wrkScript(fmt.Sprintf(`local path = %q
local prefix = %q
local n = %d
local headers = {["Content-Type"] = "application/json"}
request = function()
  n = n + 1
  return wrk.format("POST", path, headers,
    '{"customerId":' .. n .. ',"orderId":"' .. prefix .. n .. '","orderAmount":%d}')
end
`, path, prefix, first, amount))
}

// withDelay adds a pause of ms milliseconds before each connection's next
// request (wrk's delay hook).
func (s wrkScript) withDelay(ms int) wrkScript {
	if ms <= 0 {
		return s
	}
	return s + wrkScript(fmt.Sprintf("delay = function() return %d end\n", ms))
}

// runWrk runs wrk with one thread and conns connections against url for d.
func runWrk(ctx context.Context, url string, script wrkScript, conns int, d time.Duration) (WrkRun, error) {
	dir, err := os.MkdirTemp("", "flashgate-wrk-")
	if err != nil {
		return WrkRun{}, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "script.lua")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		return WrkRun{}, err
	}
	secs := max(1, int(math.Round(d.Seconds())))
	cmd := exec.CommandContext(ctx, "wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(secs)+"s",
		"--timeout", "5s", "--latency", "-s", file, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return WrkRun{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return r, fmt.Errorf("%w in:\n%s", err, out)
	}
	r.Connections = conns
	if st := cmd.ProcessState; st != nil {
		r.cpu = st.UserTime() + st.SystemTime()
	}
	return r, nil
}

var (
	wrkRateRe    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkPctRe     = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkTotalRe   = regexp.MustCompile(`(\d+) requests in`)
	wrkNon2xxRe  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocketsRe = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// parseWrk reads wrk --latency's output.
func parseWrk(out string) (WrkRun, error) {
	var r WrkRun
	m := wrkRateRe.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no Requests/sec in wrk's output")
	}
	r.Rate, _ = strconv.ParseFloat(m[1], 64)
	for _, m := range wrkPctRe.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if m[1] == "50" {
			r.P50Ms = v
		} else {
			r.P99Ms = v
		}
	}
	if m := wrkTotalRe.FindStringSubmatch(out); m != nil {
		r.Requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := wrkNon2xxRe.FindStringSubmatch(out); m != nil {
		r.Non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := wrkSocketsRe.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(s, 10, 64)
			r.SocketErrs += n
		}
	}
	return r, nil
}

// atRate is the connections and per-connection delay with which wrk sends
// about rate requests a second when an answer takes latencyMs: each
// connection sends one request per delay + latency. The delay is short (1 ms)
// so that few connections do: wrk keeps its timers in a list it walks on
// every event, and thousands of delayed connections would measure wrk.
func atRate(rate, latencyMs float64) (conns, delayMs int) {
	delayMs = 1
	conns = int(math.Ceil(rate * (float64(delayMs) + latencyMs) / 1000))
	return max(conns, 1), delayMs
}
