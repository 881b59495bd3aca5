package httpxtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
)

// HostileCase is one malformed or malicious request. The answer must be a 4xx
// with {"error", "message"} (only NetHTTP cases, refused by net/http before any
// handler runs, may answer in plain text), and nothing may be written.
type HostileCase struct {
	Name        string
	Method      string
	Path        string // sent as is: already percent-encoded where it needs to be
	Body        []byte
	ContentType string            // "" sends application/json when there is a body, "-" none
	Auth        string            // Authorization; "" sends the valid token, "-" none
	Headers     map[string]string // more headers
	Raw         string            // a raw request, for what http.Client refuses to send ({AUTH}: the valid Authorization line)

	Status  int    // the status wanted; 0: any 4xx
	Code    string // the error code wanted; "": any
	NetHTTP bool   // answered by net/http itself, not by the service
}

// hostileClient never follows redirects: a redirect is an answer too.
var hostileClient = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport:     &http.Transport{MaxIdleConnsPerHost: 4},
}

// HostileReply is an answer to a HostileCase, undecoded.
type HostileReply struct {
	Status int
	Header http.Header
	Raw    string
}

// SendHostile sends c to the server at base (http://host:port) with token as
// the valid bearer token.
func SendHostile(tb testing.TB, base, token string, c HostileCase) HostileReply {
	tb.Helper()
	if c.Raw != "" {
		raw := strings.ReplaceAll(c.Raw, "{AUTH}", "Authorization: Bearer "+token)
		return sendRaw(tb, strings.TrimPrefix(base, "http://"), raw)
	}
	u, err := url.Parse(base + c.Path)
	require.NoError(tb, err, "parse %q", c.Path)
	if p, _, _ := strings.Cut(c.Path, "?"); !strings.HasPrefix(p, "//") {
		u.Opaque = p // keep the path byte for byte: no re-encoding, no cleaning
	}
	var body io.Reader
	if c.Body != nil {
		body = bytes.NewReader(c.Body)
	}
	req, err := http.NewRequest(c.Method, base, body)
	require.NoError(tb, err)
	req.URL = u
	switch {
	case c.ContentType == "-":
	case c.ContentType != "":
		req.Header.Set("Content-Type", c.ContentType)
	case c.Body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	switch c.Auth {
	case "":
		req.Header.Set(api.HeaderAuthorization, "Bearer "+token)
	case "-":
	default:
		req.Header.Set(api.HeaderAuthorization, c.Auth)
	}
	for k, v := range c.Headers {
		req.Header[k] = append(req.Header[k], v)
	}
	resp, err := hostileClient.Do(req)
	require.NoError(tb, err, "%s %s", c.Method, c.Path)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return HostileReply{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
}

// sendRaw writes a request byte for byte and reads one answer.
func sendRaw(tb testing.TB, addr, raw string) HostileReply {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(tb, err)
	defer conn.Close()
	require.NoError(tb, conn.SetDeadline(time.Now().Add(10*time.Second)))
	// Write while reading: the server may answer and hang up before it has
	// read a long body.
	go func() { _, _ = io.WriteString(conn, raw) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(tb, err, "raw request %q", raw)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return HostileReply{Status: resp.StatusCode, Header: resp.Header, Raw: string(body)}
}

// CheckHostileReply asserts a clear 4xx: the wanted status and code, a JSON
// error body with a message, no Retry-After (nothing to retry), and no request
// id longer than the 64 characters the services allow.
func CheckHostileReply(tb testing.TB, c HostileCase, r HostileReply) {
	tb.Helper()
	if r.Status < 400 || r.Status > 499 {
		tb.Errorf("%s %.80s = %d %.200s, want a 4xx", c.Method, c.Path, r.Status, r.Raw)
		return
	}
	if c.Status != 0 && r.Status != c.Status {
		tb.Errorf("%s %.80s = %d %.200s, want %d", c.Method, c.Path, r.Status, r.Raw, c.Status)
	}
	if id := r.Header.Get(api.HeaderRequestID); len(id) > 64 {
		tb.Errorf("%s %.80s echoed a request id of %d bytes", c.Method, c.Path, len(id))
	}
	if r.Header.Get(api.HeaderRetryAfter) != "" {
		tb.Errorf("%s %.80s = %d with Retry-After, want a final answer", c.Method, c.Path, r.Status)
	}
	if c.NetHTTP {
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		tb.Errorf("%s %.80s = %d Content-Type %q, want application/json", c.Method, c.Path, r.Status, ct)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(r.Raw), &body); err != nil {
		tb.Errorf("%s %.80s = %d %.200q, want a JSON error body", c.Method, c.Path, r.Status, r.Raw)
		return
	}
	code, _ := body["error"].(string)
	msg, _ := body["message"].(string)
	if code == "" || msg == "" || httpx.Status(code) != r.Status {
		tb.Errorf("%s %.80s = %d %s, want {error, message} with a code of status %d", c.Method, c.Path, r.Status, r.Raw, r.Status)
	}
	for k := range body {
		if k != "error" && k != "message" && k != "reason" {
			tb.Errorf("%s %.80s = %s: unexpected field %q", c.Method, c.Path, r.Raw, k)
		}
	}
	if c.Code != "" && code != c.Code {
		tb.Errorf("%s %.80s = %d %s, want error %s", c.Method, c.Path, r.Status, r.Raw, c.Code)
	}
}

// RunHostile sends each case to the server at base as a subtest and checks
// its reply with CheckHostileReply; then count, which reads everything a
// hostile request must not change, must read as before it, and GET alive (a
// held reservation) must still answer 200. A table shorter than 50 cases is
// a mistake in the table.
func RunHostile[C comparable](t *testing.T, base, token string, cases []HostileCase, alive string, count func(testing.TB) C) {
	t.Helper()
	require.GreaterOrEqual(t, len(cases), 50)
	t.Logf("%d hostile cases", len(cases))

	before := count(t)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := SendHostile(t, base, token, c)
			CheckHostileReply(t, c, r)
			if after := count(t); after != before {
				t.Errorf("%s %.80s wrote or called Redis: counts %+v, want %+v", c.Method, c.Path, after, before)
				before = after // blame the next case only for its own writes
			}
			// Still answering.
			ok := SendHostile(t, base, token, HostileCase{Method: http.MethodGet, Path: alive})
			if ok.Status != http.StatusOK {
				t.Errorf("after %q: GET reservation = %d %s, want 200", c.Name, ok.Status, ok.Raw)
			}
		})
	}
}

// RowCounts is what a hostile request must not change in Postgres.
type RowCounts struct {
	Vouchers, Rows, Usage, Used int // the test's own rows, by code prefix
	AllRows, AllUsage           int // every row, when the database is this binary's own
}

// CountRows reads RowCounts from pool: the rows whose voucher code or orderId
// starts with prefix and, when the database is this test binary's own
// (DATABASE_URL unset), every row.
func CountRows(tb testing.TB, pool *pgxpool.Pool, prefix string) RowCounts {
	tb.Helper()
	var c RowCounts
	require.NoError(tb, pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM voucher WHERE code LIKE $1 || '%'),
		       (SELECT coalesce(sum(used_count), 0) FROM voucher WHERE code LIKE $1 || '%'),
		       (SELECT count(*) FROM voucher_redemption WHERE voucher_code LIKE $1 || '%' OR order_id LIKE $1 || '%'),
		       (SELECT count(*) FROM voucher_customer_usage WHERE voucher_code LIKE $1 || '%')`, prefix).
		Scan(&c.Vouchers, &c.Used, &c.Rows, &c.Usage))
	if os.Getenv("DATABASE_URL") == "" {
		require.NoError(tb, pool.QueryRow(context.Background(), `
			SELECT (SELECT count(*) FROM voucher_redemption), (SELECT coalesce(sum(used_count), 0) FROM voucher_customer_usage)`).
			Scan(&c.AllRows, &c.AllUsage))
	}
	return c
}

// Serve serves h with the production server settings (httpx.NewServer:
// timeouts, MaxHeaderBytes) on a free port and returns its base URL.
func Serve(tb testing.TB, h http.Handler) (string, *http.Server) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	srv := httpx.NewServer(ln.Addr().String(), h)
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), srv
}

// CheckSlowHeadersCutOff serves h with httpx.NewServer's settings but a
// ReadHeaderTimeout of 300ms, trickles a request's headers and asserts the
// server hangs up within about a second.
func CheckSlowHeadersCutOff(tb testing.TB, h http.Handler) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	srv := httpx.NewServer(ln.Addr().String(), h)
	require.Greater(tb, srv.ReadHeaderTimeout, time.Duration(0), "NewServer must set ReadHeaderTimeout")
	require.LessOrEqual(tb, srv.ReadHeaderTimeout, 10*time.Second, "NewServer's ReadHeaderTimeout")
	srv.ReadHeaderTimeout = 300 * time.Millisecond
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(tb, err)
	defer conn.Close()
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		req := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 100) + "\r\n\r\n"
		for i := 0; i < len(req); i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{req[i]}); err != nil {
				return
			}
		}
	}()
	require.NoError(tb, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	got, err := io.ReadAll(conn)
	elapsed := time.Since(start)
	var ne net.Error
	if err != nil && (errors.As(err, &ne) && ne.Timeout()) {
		tb.Fatalf("connection still open after %s, want it closed by ReadHeaderTimeout", elapsed)
	}
	if strings.Contains(string(got), "200 OK") {
		tb.Fatalf("slow request was served: %q", got)
	}
	if elapsed > 1500*time.Millisecond {
		tb.Errorf("connection closed after %s, want about 300ms", elapsed)
	}
	tb.Logf("closed after %s (%d bytes answered: %q)", elapsed.Round(time.Millisecond), len(got), got)
}

// CheckMetricsMethodsBounded sends 40 requests with made-up methods to path on
// the server at base and asserts /metrics holds at most the standard methods
// as label values.
func CheckMetricsMethodsBounded(tb testing.TB, base, path string) {
	tb.Helper()
	for i := range 40 {
		r := SendHostile(tb, base, "", HostileCase{Method: fmt.Sprintf("M%03dX", i), Path: path, Auth: "-"})
		if r.Status < 400 || r.Status > 499 {
			tb.Errorf("method M%03dX = %d, want a 4xx", i, r.Status)
		}
	}
	r := SendHostile(tb, base, "", HostileCase{Method: http.MethodGet, Path: "/metrics", Auth: "-"})
	require.Equal(tb, http.StatusOK, r.Status)
	methods := map[string]bool{}
	for _, m := range regexp.MustCompile(`method="([^"]*)"`).FindAllStringSubmatch(r.Raw, -1) {
		methods[m[1]] = true
	}
	if len(methods) > 10 {
		tb.Errorf("/metrics has %d distinct method labels after 40 made-up methods, want the standard ones only", len(methods))
	}
}
