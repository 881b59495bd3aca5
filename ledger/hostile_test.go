package main

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
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/devstack"
	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/voucher"
)

// hostileCase is one malformed or malicious request. The answer must be a 4xx
// with {"error", "message"} (only netHTTP cases, refused by net/http before any
// handler runs, may answer in plain text), and nothing may be written.
type hostileCase struct {
	name    string
	method  string
	path    string // sent as is: already percent-encoded where it needs to be
	body    []byte
	ctype   string            // Content-Type; "" sends application/json when there is a body, "-" none
	auth    string            // Authorization; "" sends the valid token, "-" none
	headers map[string]string // more headers
	raw     string            // a raw request, for what http.Client refuses to send ({AUTH}: the valid Authorization line)

	status  int    // the status wanted; 0: any 4xx
	code    string // the error code wanted; "": any
	netHTTP bool   // answered by net/http itself, not by the service
}

// hostileClient never follows redirects: a redirect is an answer too.
var hostileClient = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport:     &http.Transport{MaxIdleConnsPerHost: 4},
}

type hostileReply struct {
	Status int
	Header http.Header
	Raw    string
}

// sendHostile sends c to the server at base (http://host:port) with token as
// the valid bearer token.
func sendHostile(tb testing.TB, base, token string, c hostileCase) hostileReply {
	tb.Helper()
	if c.raw != "" {
		raw := strings.ReplaceAll(c.raw, "{AUTH}", "Authorization: Bearer "+token)
		return sendHostileRaw(tb, strings.TrimPrefix(base, "http://"), raw)
	}
	u, err := url.Parse(base + c.path)
	require.NoError(tb, err, "parse %q", c.path)
	if p, _, _ := strings.Cut(c.path, "?"); !strings.HasPrefix(p, "//") {
		u.Opaque = p // keep the path byte for byte: no re-encoding, no cleaning
	}
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, base, body)
	require.NoError(tb, err)
	req.URL = u
	switch {
	case c.ctype == "-":
	case c.ctype != "":
		req.Header.Set("Content-Type", c.ctype)
	case c.body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	switch c.auth {
	case "":
		req.Header.Set("Authorization", "Bearer "+token)
	case "-":
	default:
		req.Header.Set("Authorization", c.auth)
	}
	for k, v := range c.headers {
		req.Header[k] = append(req.Header[k], v)
	}
	resp, err := hostileClient.Do(req)
	require.NoError(tb, err, "%s %s", c.method, c.path)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return hostileReply{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
}

// sendHostileRaw writes a request byte for byte and reads one answer.
func sendHostileRaw(tb testing.TB, addr, raw string) hostileReply {
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
	return hostileReply{Status: resp.StatusCode, Header: resp.Header, Raw: string(body)}
}

// checkHostileReply asserts a clear 4xx: the wanted status and code, a JSON
// error body with a message, no Retry-After (nothing to retry), and no request
// id longer than the 64 characters the services allow.
func checkHostileReply(t *testing.T, c hostileCase, r hostileReply) {
	t.Helper()
	if r.Status < 400 || r.Status > 499 {
		t.Errorf("%s %.80s = %d %.200s, want a 4xx", c.method, c.path, r.Status, r.Raw)
		return
	}
	if c.status != 0 && r.Status != c.status {
		t.Errorf("%s %.80s = %d %.200s, want %d", c.method, c.path, r.Status, r.Raw, c.status)
	}
	if id := r.Header.Get(httpx.RequestIDHeader); len(id) > 64 {
		t.Errorf("%s %.80s echoed a request id of %d bytes", c.method, c.path, len(id))
	}
	if r.Header.Get("Retry-After") != "" {
		t.Errorf("%s %.80s = %d with Retry-After, want a final answer", c.method, c.path, r.Status)
	}
	if c.netHTTP {
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %.80s = %d Content-Type %q, want application/json", c.method, c.path, r.Status, ct)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(r.Raw), &body); err != nil {
		t.Errorf("%s %.80s = %d %.200q, want a JSON error body", c.method, c.path, r.Status, r.Raw)
		return
	}
	code, _ := body["error"].(string)
	msg, _ := body["message"].(string)
	if code == "" || msg == "" || httpx.Status(code) != r.Status {
		t.Errorf("%s %.80s = %d %s, want {error, message} with a code of status %d", c.method, c.path, r.Status, r.Raw, r.Status)
	}
	for k := range body {
		if k != "error" && k != "message" && k != "reason" {
			t.Errorf("%s %.80s = %s: unexpected field %q", c.method, c.path, r.Raw, k)
		}
	}
	if c.code != "" && code != c.code {
		t.Errorf("%s %.80s = %d %s, want error %s", c.method, c.path, r.Status, r.Raw, c.code)
	}
}

// serveHostile serves h with the production server settings (httpx.NewServer:
// timeouts, MaxHeaderBytes) on a free port and returns its base URL.
func serveHostile(tb testing.TB, h http.Handler) (string, *http.Server) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	srv := httpx.NewServer(ln.Addr().String(), h)
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), srv
}

// Shapes shared by the hostile tables of both services.
func hostileNested(depth int, open, close, inner string) []byte {
	return []byte(strings.Repeat(open, depth) + inner + strings.Repeat(close, depth))
}

// hostileChunked encodes b as one HTTP/1.1 chunk and the last chunk.
func hostileChunked(b []byte) string {
	return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b)
}

func hostileClaim(customer, order, amount string) []byte {
	return []byte(fmt.Sprintf(`{"customerId":%s,"orderId":%s,"orderAmount":%s}`, customer, order, amount))
}

// publicHostileCases are the cases for the routes both services serve: code is
// a standard voucher, flash a flash voucher, order an order of code held by
// customer 1, fresh a prefix for orderIds that must never be written.
func publicHostileCases(code, flash, order, fresh string) []hostileCase {
	reserve := "/vouchers/" + code + "/reservations"
	flashReserve := "/vouchers/" + flash + "/reservations"
	get := reserve + "/" + order
	q := func(s string) string { return `"` + s + `"` }
	id := func(n int) string { return q(fmt.Sprintf("%s-%d", fresh, n)) }
	valid := func(n int) []byte { return hostileClaim("7", id(n), "5000") }
	post := func(name string, body []byte, want string) hostileCase {
		return hostileCase{name: name, method: http.MethodPost, path: reserve, body: body, status: http.StatusBadRequest, code: want}
	}
	invalid := voucher.CodeInvalidRequest
	big := append(valid(1)[:len(valid(1))-1], []byte(`,"pad":"`+strings.Repeat("x", 17<<10)+`"}`)...)
	spaced := append(bytes.Repeat([]byte(" "), 17<<10), valid(2)...)

	return []hostileCase{
		// Sizes and depth.
		post("body of 17 KiB", big, invalid),
		post("17 KiB of whitespace before a valid body", spaced, invalid),
		post("body of 10 MiB", append(valid(3), bytes.Repeat([]byte(" "), 10<<20)...), invalid),
		post("10000 nested arrays", hostileNested(10000, "[", "]", ""), invalid),
		post("10000 nested objects", hostileNested(10000, `{"a":`, "}", "1"), invalid),
		post("10000 nested arrays as customerId", []byte(`{"customerId":`+string(hostileNested(10000, "[", "]", "1"))+`,"orderId":"x","orderAmount":1}`), invalid),
		// Numbers.
		post("customerId 1e400", hostileClaim("1e400", id(4), "5000"), invalid),
		post("customerId 2^63", hostileClaim("9223372036854775808", id(5), "5000"), invalid),
		post("customerId -2^63-1", hostileClaim("-9223372036854775809", id(6), "5000"), invalid),
		post("customerId -0", hostileClaim("-0", id(7), "5000"), invalid),
		post("customerId 0", hostileClaim("0", id(8), "5000"), invalid),
		post("customerId 1e2 as an int", hostileClaim("1e2", id(9), "5000"), invalid),
		post("customerId 1.0", hostileClaim("1.0", id(10), "5000"), invalid),
		post("customerId as a string", hostileClaim(`"7"`, id(11), "5000"), invalid),
		post("customerId true", hostileClaim("true", id(12), "5000"), invalid),
		post("orderAmount above MaxAmount", hostileClaim("7", id(13), "1125899906842625"), invalid),
		post("orderAmount negative", hostileClaim("7", id(14), "-1"), invalid),
		post("orderAmount 1e400", hostileClaim("7", id(15), "1e400"), invalid),
		post("orderAmount NaN", hostileClaim("7", id(16), "NaN"), invalid),
		post("orderAmount Infinity", hostileClaim("7", id(17), "Infinity"), invalid),
		post("orderAmount -Infinity", hostileClaim("7", id(18), "-Infinity"), invalid),
		post("orderAmount hex", hostileClaim("7", id(19), "0x10"), invalid),
		post("orderAmount with a leading zero", hostileClaim("7", id(20), "05000"), invalid),
		// Keys.
		post("duplicate customerId", []byte(`{"customerId":7,"customerId":8,"orderId":`+id(21)+`,"orderAmount":5000}`), invalid),
		post("duplicate orderId, the first one invalid", []byte(`{"customerId":7,"orderId":"../x","orderId":`+id(22)+`,"orderAmount":5000}`), invalid),
		post("key in another case", []byte(`{"CustomerID":7,"orderId":`+id(23)+`,"orderAmount":5000}`), invalid),
		post("unknown field", []byte(`{"customerId":7,"orderId":`+id(24)+`,"orderAmount":5000,"discountAmount":1}`), invalid),
		post("missing customerId", []byte(`{"orderId":`+id(25)+`,"orderAmount":5000}`), invalid),
		post("null customerId", hostileClaim("null", id(26), "5000"), invalid),
		post("__proto__ key", []byte(`{"__proto__":{"customerId":7},"orderId":`+id(27)+`,"orderAmount":5000}`), invalid),
		// Encodings and literals.
		post("UTF-8 BOM", append([]byte("\xef\xbb\xbf"), valid(28)...), invalid),
		post("no-break space before the object", append([]byte("\u00a0"), valid(29)...), invalid),
		post("NUL byte before the object", append([]byte{0}, valid(30)...), invalid),
		post("NUL byte inside a string", hostileClaim("7", "\"a\x00b\"", "5000"), invalid),
		post("escaped NUL in orderId", hostileClaim("7", `"a\u0000b"`, "5000"), invalid),
		post("invalid UTF-8 in orderId", hostileClaim("7", "\"\xff\xfe\"", "5000"), invalid),
		post("invalid UTF-8 in a key", []byte("{\"customerId\xff\":7,\"orderId\":"+id(31)+",\"orderAmount\":5000}"), invalid),
		post("UTF-16 body", []byte("\xff\xfe{\x00}\x00"), invalid),
		post("single quotes", []byte(`{'customerId':7,'orderId':'x','orderAmount':5000}`), invalid),
		post("comments", []byte(`{"customerId":7,/* hi */"orderId":`+id(32)+`,"orderAmount":5000}`), invalid),
		post("trailing comma", []byte(`{"customerId":7,"orderId":`+id(33)+`,"orderAmount":5000,}`), invalid),
		post("two objects", append(valid(34), valid(35)...), invalid),
		post("trailing garbage", append(valid(36), []byte(" x")...), invalid),
		post("truncated", valid(37)[:20], invalid),
		post("array instead of an object", append(append([]byte("["), valid(38)...), ']'), invalid),
		post("string instead of an object", []byte(`"{\"customerId\":7}"`), invalid),
		post("number instead of an object", []byte(`42`), invalid),
		post("null instead of an object", []byte(`null`), invalid),
		post("empty body", []byte{}, invalid),
		// OrderIds in the body.
		post("orderId with braces", hostileClaim("7", `"{x}"`, "5000"), invalid),
		post("orderId with a space", hostileClaim("7", `"a b"`, "5000"), invalid),
		post("orderId with %00", hostileClaim("7", `"a%00"`, "5000"), invalid),
		post("orderId with a slash", hostileClaim("7", `"../../admin"`, "5000"), invalid),
		post("orderId with unicode", hostileClaim("7", `"ordér-1"`, "5000"), invalid),
		post("orderId of 65 bytes", hostileClaim("7", q(strings.Repeat("x", 65)), "5000"), invalid),
		post("orderId empty", hostileClaim("7", `""`, "5000"), invalid),
		// Content types.
		{name: "text/plain", method: http.MethodPost, path: reserve, body: valid(39), ctype: "text/plain", status: 400, code: invalid},
		{name: "form", method: http.MethodPost, path: reserve, body: []byte("customerId=7&orderId=x&orderAmount=5000"),
			ctype: "application/x-www-form-urlencoded", status: 400, code: invalid},
		{name: "multipart", method: http.MethodPost, path: reserve, body: []byte("--b\r\n\r\n{}\r\n--b--\r\n"),
			ctype: "multipart/form-data; boundary=b", status: 400, code: invalid},
		{name: "json with a suffix", method: http.MethodPost, path: reserve, body: valid(40), ctype: "application/json-patch+json", status: 400, code: invalid},
		// The flash voucher: refused before Redis is asked.
		{name: "flash: 17 KiB body", method: http.MethodPost, path: flashReserve, body: big, status: 400, code: invalid},
		{name: "flash: customerId 2^63", method: http.MethodPost, path: flashReserve, body: hostileClaim("9223372036854775808", id(41), "5000"), status: 400, code: invalid},
		{name: "flash: orderId with braces", method: http.MethodPost, path: flashReserve, body: hostileClaim("7", `"{x}"`, "5000"), status: 400, code: invalid},
		// Codes and orderIds in the path.
		{name: "code with braces", method: http.MethodPost, path: "/vouchers/%7B" + code + "%7D/reservations", body: valid(42), status: 400, code: invalid},
		{name: "code with a colon", method: http.MethodPost, path: "/vouchers/" + code + "%3Aremaining/reservations", body: valid(43), status: 400, code: invalid},
		{name: "code with %00", method: http.MethodPost, path: "/vouchers/" + code + "%00/reservations", body: valid(44), status: 400, code: invalid},
		{name: "code with unicode", method: http.MethodPost, path: "/vouchers/caf%C3%A9/reservations", body: valid(45), status: 400, code: invalid},
		{name: "code with invalid UTF-8", method: http.MethodPost, path: "/vouchers/%FF%FE/reservations", body: valid(46), status: 400, code: invalid},
		{name: "code with a space", method: http.MethodPost, path: "/vouchers/a%20b/reservations", body: valid(47), status: 400, code: invalid},
		{name: "code of 33 bytes", method: http.MethodPost, path: "/vouchers/" + strings.Repeat("A", 33) + "/reservations", body: valid(48), status: 400, code: invalid},
		{name: "code of 8 KiB", method: http.MethodGet, path: "/vouchers/" + strings.Repeat("A", 8<<10) + "/reservations/x", status: 400, code: invalid},
		{name: "code with a newline", method: http.MethodGet, path: "/vouchers/a%0Ab/reservations/x", status: 400, code: invalid},
		{name: "orderId with braces", method: http.MethodGet, path: reserve + "/%7Bx%7D", status: 400, code: invalid},
		{name: "orderId with %00", method: http.MethodPost, path: reserve + "/a%00b/confirm", status: 400, code: invalid},
		{name: "orderId with unicode", method: http.MethodDelete, path: reserve + "/ord%C3%A9r", status: 400, code: invalid},
		{name: "orderId of 65 bytes", method: http.MethodGet, path: reserve + "/" + strings.Repeat("x", 65), status: 400, code: invalid},
		{name: "orderId with a space", method: http.MethodDelete, path: reserve + "/a%20b", status: 400, code: invalid},
		{name: "orderId with a question mark", method: http.MethodGet, path: reserve + "/a%3Fb", status: 400, code: invalid},
		// Path tricks.
		{name: "dot-dot to the admin routes", method: http.MethodGet, path: "/vouchers/../admin/vouchers/" + code, status: 404, code: voucher.CodeNotFound},
		{name: "dot-dot after the orderId", method: http.MethodDelete, path: get + "/../../../../admin/vouchers/" + code, status: 404, code: voucher.CodeNotFound},
		{name: "encoded dot-dot and slash", method: http.MethodGet, path: reserve + "/..%2F..%2Fadmin", status: 404, code: voucher.CodeNotFound},
		{name: "double slash in front", method: http.MethodPost, path: "/" + reserve, body: valid(49), status: 404, code: voucher.CodeNotFound},
		{name: "double slash inside", method: http.MethodGet, path: "/vouchers/" + code + "//reservations/" + order},
		{name: "empty code", method: http.MethodPost, path: "/vouchers//reservations", body: valid(50), status: 400, code: invalid},
		{name: "encoded slash in the code", method: http.MethodPost, path: "/vouchers/a%2Fb/reservations", body: valid(51), status: 404, code: voucher.CodeNotFound},
		{name: "backslash", method: http.MethodGet, path: "/vouchers%5C" + code + "%5Creservations%5C" + order, status: 404, code: voucher.CodeNotFound},
		{name: "trailing slash on reserve", method: http.MethodPost, path: reserve + "/", body: valid(52)},
		{name: "trailing slash on get", method: http.MethodGet, path: get + "/"},
		{name: "unknown route", method: http.MethodGet, path: "/vouchers/" + code, status: 404, code: voucher.CodeNotFound},
		{name: "root", method: http.MethodGet, path: "/", status: 404, code: voucher.CodeNotFound},
		{name: "query string smuggling a body", method: http.MethodPost, path: reserve + "?customerId=7&orderId=x&orderAmount=5000", status: 400, code: invalid},
		// Methods.
		{name: "PUT reserve", method: http.MethodPut, path: reserve, body: valid(53), status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "PATCH reservation", method: http.MethodPatch, path: get, body: []byte(`{"status":"CONFIRMED"}`), status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "GET reserve", method: http.MethodGet, path: reserve, status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "POST reservation", method: http.MethodPost, path: get, body: valid(54), status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "GET confirm", method: http.MethodGet, path: get + "/confirm", status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "OPTIONS", method: http.MethodOptions, path: reserve, status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "TRACE", method: http.MethodTrace, path: get, status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "made-up method", method: "RESERVE", path: reserve, body: valid(55), status: 405, code: voucher.CodeMethodNotAllowed},
		// Headers.
		{name: "header of 20 KiB", method: http.MethodPost, path: reserve, body: []byte("[]"),
			headers: map[string]string{"X-Padding": strings.Repeat("a", 20<<10)}, status: 400, code: invalid},
		{name: "request id of 10 KiB", method: http.MethodPost, path: reserve, body: []byte("[]"),
			headers: map[string]string{httpx.RequestIDHeader: strings.Repeat("r", 10<<10)}, status: 400, code: invalid},
		{name: "headers over 32 KiB", method: http.MethodPost, path: reserve, body: valid(56),
			headers: map[string]string{"X-Padding": strings.Repeat("a", 40<<10)}, status: 431, netHTTP: true},
		{name: "NUL in a header value", raw: "GET " + get + " HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nX-A: a\x00b\r\n\r\n", status: 400, netHTTP: true},
		{name: "invalid UTF-8 in the request line", raw: "GET /vouchers/\xff\xfe/reservations/x HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n\r\n", status: 400},
		{name: "bare LF line endings", raw: "POST " + reserve + " HTTP/1.1\nHost: x\n{AUTH}\nContent-Length: 2\n\n[]", status: 400, code: invalid},
		{name: "Content-Length and chunked", raw: "POST " + reserve + " HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nContent-Length: 60\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + string(valid(57)), status: 400},
		{name: "chunked body of 10 MiB", raw: "POST " + reserve + " HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n" + hostileChunked(append(valid(58), bytes.Repeat([]byte(" "), 10<<20)...)), status: 400, code: invalid},
	}
}

// hostileCounts is what a hostile request must not change.
type hostileCounts struct {
	Vouchers, Rows, Usage, Used int // the test's own rows, by code prefix
	AllRows, AllUsage           int // every row, when the database is this binary's own
	GateCalls                   int64
}

func countHostile(tb testing.TB, l *testLedger, prefix string, g *gate.Gate) hostileCounts {
	tb.Helper()
	var c hostileCounts
	require.NoError(tb, l.pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM voucher WHERE code LIKE $1 || '%'),
		       (SELECT coalesce(sum(used_count), 0) FROM voucher WHERE code LIKE $1 || '%'),
		       (SELECT count(*) FROM voucher_redemption WHERE voucher_code LIKE $1 || '%' OR order_id LIKE $1 || '%'),
		       (SELECT count(*) FROM voucher_customer_usage WHERE voucher_code LIKE $1 || '%')`, prefix).
		Scan(&c.Vouchers, &c.Used, &c.Rows, &c.Usage))
	if os.Getenv("DATABASE_URL") == "" {
		require.NoError(tb, l.pool.QueryRow(context.Background(), `
			SELECT (SELECT count(*) FROM voucher_redemption), (SELECT coalesce(sum(used_count), 0) FROM voucher_customer_usage)`).
			Scan(&c.AllRows, &c.AllUsage))
	}
	if g != nil {
		c.GateCalls = g.Calls()
	}
	return c
}

// TestLedgerHostileInput sends every hostile case to the ledger behind the
// production server settings: each gets a clear 4xx, nothing is written to
// Postgres, Redis is never called, and the ledger still answers afterwards.
// It does not run in parallel, so that whole-table counts are its own.
func TestLedgerHostileInput(t *testing.T) {
	const token = "hostile-ledger-token"
	l := newTestLedger(t, ledgerOptions{token: token})
	base, _ := serveHostile(t, (&Server{ledger: l.led, jobs: l.jobs, token: token,
		ready: func(c *gin.Context) error { return l.store.Ping(c) }}).Handler())

	prefix := newCode(t)
	code, flash := prefix+"s", prefix+"f"
	l.createVoucher(t, spec(code, 10, 1, false))
	l.createVoucher(t, spec(flash, 10, 1, true))
	order := prefix + "-held"
	st, body := l.do(t, http.MethodPost, "/vouchers/"+code+"/reservations", claimBody(1, order, 5_000))
	require.Equal(t, http.StatusCreated, st, body)
	flashBefore, loaded, err := l.gate.State(context.Background(), flash)
	require.NoError(t, err)
	require.True(t, loaded)

	cases := publicHostileCases(code, flash, order, prefix+"-x")
	admin := "/admin/vouchers"
	newVoucher := func(code, extra string) []byte {
		return []byte(`{"code":"` + code + `","discountAmount":100,"totalLimit":5,` +
			`"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"` + extra + `}`)
	}
	vBody := func(fields string) []byte { return []byte(`{` + fields + `}`) }
	invalid := voucher.CodeInvalidRequest
	unauthorized := voucher.CodeUnauthorized
	cases = append(cases, []hostileCase{
		// Authentication.
		{name: "no Authorization", method: http.MethodPost, path: "/vouchers/" + code + "/reservations",
			body: hostileClaim("7", `"`+prefix+`-a1"`, "5000"), auth: "-", status: 401, code: unauthorized},
		{name: "wrong token", method: http.MethodGet, path: "/vouchers/" + code + "/reservations/" + order,
			auth: "Bearer wrong-token", status: 401, code: unauthorized},
		{name: "token without Bearer", method: http.MethodGet, path: "/vouchers/" + code + "/reservations/" + order,
			auth: token, status: 401, code: unauthorized},
		{name: "empty bearer", method: http.MethodGet, path: admin + "/" + code, auth: "Bearer ", status: 401, code: unauthorized},
		{name: "token prefix", method: http.MethodGet, path: admin + "/" + code, auth: "Bearer " + token[:len(token)-1], status: 401, code: unauthorized},
		{name: "token with a suffix", method: http.MethodGet, path: admin + "/" + code, auth: "Bearer " + token + "x", status: 401, code: unauthorized},
		{name: "Basic auth", method: http.MethodGet, path: admin + "/" + code, auth: "Basic aG9zdGlsZTp0b2tlbg==", status: 401, code: unauthorized},
		{name: "token of 20 KiB", method: http.MethodGet, path: admin + "/" + code, auth: "Bearer " + strings.Repeat("t", 20<<10), status: 401, code: unauthorized},
		{name: "wrong token first of two", method: http.MethodGet, path: admin + "/" + code, auth: "Bearer nope",
			headers: map[string]string{"Authorization": "Bearer " + token}, status: 401, code: unauthorized},
		{name: "no token on create voucher", method: http.MethodPost, path: admin, body: newVoucher(prefix+"a2", ""), auth: "-", status: 401, code: unauthorized},
		{name: "no token on the internal write", method: http.MethodPost, path: "/internal/vouchers/" + flash + "/reservations",
			body: hostileClaim("7", `"`+prefix+`-a3"`, "5000"), auth: "-", status: 401, code: unauthorized},
		{name: "no token on warmup", method: http.MethodPost, path: admin + "/" + flash + "/warmup", auth: "-", status: 401, code: unauthorized},
		{name: "no token on a wrong method", method: http.MethodPut, path: admin, auth: "-", status: 401, code: unauthorized},
		// Admin bodies.
		{name: "voucher code with braces", method: http.MethodPost, path: admin, body: newVoucher("{"+prefix+"}", ""), status: 400, code: invalid},
		{name: "voucher code with a colon", method: http.MethodPost, path: admin, body: newVoucher(prefix+":meta", ""), status: 400, code: invalid},
		{name: "voucher code with unicode", method: http.MethodPost, path: admin, body: newVoucher(prefix+"é", ""), status: 400, code: invalid},
		{name: "voucher totalLimit 1e400", method: http.MethodPost, path: admin, body: vBody(`"code":"` + prefix + `b1","discountAmount":100,"totalLimit":1e400,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`), status: 400, code: invalid},
		{name: "voucher totalLimit 2^31", method: http.MethodPost, path: admin, body: vBody(`"code":"` + prefix + `b2","discountAmount":100,"totalLimit":2147483648,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`), status: 400, code: invalid},
		{name: "voucher discount 2^63", method: http.MethodPost, path: admin, body: vBody(`"code":"` + prefix + `b3","discountAmount":9223372036854775808,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`), status: 400, code: invalid},
		{name: "voucher with usedCount", method: http.MethodPost, path: admin, body: newVoucher(prefix+"b4", `,"usedCount":5`), status: 400, code: invalid},
		{name: "voucher with a date that is not RFC 3339", method: http.MethodPost, path: admin, body: vBody(`"code":"` + prefix + `b5","discountAmount":100,"totalLimit":1,"startsAt":"01/01/2026","endsAt":"2030-01-01T00:00:00Z"`), status: 400, code: invalid},
		{name: "voucher ending after year 9999 in UTC", method: http.MethodPost, path: admin, body: vBody(`"code":"` + prefix + `b6","discountAmount":100,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"9999-12-31T23:59:59-23:59"`), status: 400, code: invalid},
		{name: "voucher starting before year 0 in UTC", method: http.MethodPost, path: admin, body: vBody(`"code":"` + prefix + `b7","discountAmount":100,"totalLimit":1,"startsAt":"0000-01-01T00:00:00+01:00","endsAt":"2030-01-01T00:00:00Z"`), status: 400, code: invalid},
		{name: "voucher flashSale as a string", method: http.MethodPost, path: admin, body: newVoucher(prefix+"b8", `,"flashSale":"true"`), status: 400, code: invalid},
		{name: "voucher duplicate code key", method: http.MethodPost, path: admin, body: vBody(`"code":"{x}","code":"` + prefix + `b9","discountAmount":100,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2030-01-01T00:00:00Z"`), status: 400, code: invalid},
		{name: "voucher as an array", method: http.MethodPost, path: admin, body: []byte(`[` + string(newVoucher(prefix+"b10", "")) + `]`), status: 400, code: invalid},
		{name: "voucher 10000 nested", method: http.MethodPost, path: admin, body: hostileNested(10000, `{"code":`, "}", `"x"`), status: 400, code: invalid},
		{name: "internal write with braces", method: http.MethodPost, path: "/internal/vouchers/%7B" + flash + "%7D/reservations",
			body: hostileClaim("7", `"`+prefix+`-a4"`, "5000"), status: 400, code: invalid},
		{name: "internal write of 17 KiB", method: http.MethodPost, path: "/internal/vouchers/" + flash + "/reservations",
			body: append(hostileClaim("7", `"`+prefix+`-a5"`, "5000"), bytes.Repeat([]byte(" "), 17<<10)...), status: 400, code: invalid},
		{name: "warmup of an encoded code", method: http.MethodPost, path: admin + "/" + flash + "%3A/warmup", status: 400, code: invalid},
		{name: "DELETE a voucher", method: http.MethodDelete, path: admin + "/" + code, status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "PUT the vouchers", method: http.MethodPut, path: admin, body: newVoucher(prefix+"b11", ""), status: 405, code: voucher.CodeMethodNotAllowed},
		{name: "trailing slash on an admin route", method: http.MethodGet, path: admin + "/" + code + "/"},
	}...)
	require.GreaterOrEqual(t, len(cases), 50)
	t.Logf("%d hostile cases", len(cases))

	before := countHostile(t, l, prefix, l.gate)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sendHostile(t, base, token, c)
			checkHostileReply(t, c, r)
			if after := countHostile(t, l, prefix, l.gate); after != before {
				t.Errorf("%s %.80s wrote or called Redis: counts %+v, want %+v", c.method, c.path, after, before)
				before = after // blame the next case only for its own writes
			}
			// Still answering.
			ok := sendHostile(t, base, token, hostileCase{method: http.MethodGet, path: "/vouchers/" + code + "/reservations/" + order})
			if ok.Status != http.StatusOK {
				t.Errorf("after %q: GET reservation = %d %s, want 200", c.name, ok.Status, ok.Raw)
			}
		})
	}

	flashAfter, _, err := l.gate.State(context.Background(), flash)
	require.NoError(t, err)
	assert.Equal(t, flashBefore.Remaining, flashAfter.Remaining, "flash voucher's Redis counter")
	assert.Equal(t, flashBefore.Orders, flashAfter.Orders, "flash voucher's Redis orders")

	// A valid write still goes through, exactly once.
	was := l.counts(t, code)
	r := sendHostile(t, base, token, hostileCase{method: http.MethodPost, path: "/vouchers/" + code + "/reservations",
		body: hostileClaim("2", `"`+prefix+`-last"`, "5000")})
	assert.Equal(t, http.StatusCreated, r.Status, r.Raw)
	assert.Equal(t, dbCounts{Used: was.Used + 1, Rows: was.Rows + 1, Active: was.Active + 1, MaxPerCustomer: 1}, l.counts(t, code))
}

// TestLedgerSlowHeadersCutOff: a client that sends its headers one byte per
// 100ms is cut off by ReadHeaderTimeout. The default is 5s; the test lowers it
// to keep short, and checks the default is set.
func TestLedgerSlowHeadersCutOff(t *testing.T) {
	t.Parallel()
	l := newTestLedger(t, ledgerOptions{noRedis: true, token: "slow-token"})
	h := (&Server{ledger: l.led, token: "slow-token", ready: func(c *gin.Context) error { return l.store.Ping(c) }}).Handler()
	checkSlowHeadersCutOff(t, h)
}

// checkSlowHeadersCutOff serves h with httpx.NewServer's settings but a ReadHeaderTimeout
// of 300ms, trickles a request's headers and asserts the server hangs up
// within about a second.
func checkSlowHeadersCutOff(t *testing.T, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httpx.NewServer(ln.Addr().String(), h)
	require.Greater(t, srv.ReadHeaderTimeout, time.Duration(0), "NewServer must set ReadHeaderTimeout")
	require.LessOrEqual(t, srv.ReadHeaderTimeout, 10*time.Second, "NewServer's ReadHeaderTimeout")
	srv.ReadHeaderTimeout = 300 * time.Millisecond
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
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
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	got, err := io.ReadAll(conn)
	elapsed := time.Since(start)
	var ne net.Error
	if err != nil && (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("connection still open after %s, want it closed by ReadHeaderTimeout", elapsed)
	}
	if strings.Contains(string(got), "200 OK") {
		t.Fatalf("slow request was served: %q", got)
	}
	if elapsed > 1500*time.Millisecond {
		t.Errorf("connection closed after %s, want about 300ms", elapsed)
	}
	t.Logf("closed after %s (%d bytes answered: %q)", elapsed.Round(time.Millisecond), len(got), got)
}

// TestLedgerTokenNeverLogged runs the real bin/ledger, sends it requests with
// wrong tokens (one the real token without "Bearer", one with a suffix) and
// valid requests that make it log (a flash voucher without Redis: a warning and
// 503s), and checks that neither the real token nor the wrong ones appear in
// its output.
func TestLedgerTokenNeverLogged(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "ledger")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "build ledger: %s", out)
	port, err := devstack.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	const token = "s3cret-ledger-token-7f1c2d"
	led, err := devstack.StartService("ledger-logs", bin, []string{
		"LEDGER_ADDR=" + addr, "DATABASE_URL=" + devstack.PostgresURL(t), "REDIS_URL=",
		"LEDGER_TOKEN=" + token, "EXPIRY_INTERVAL=1h", "RECONCILE_INTERVAL=1h",
	}, "http://"+addr+"/healthz")
	require.NoError(t, err)
	t.Cleanup(func() { _ = led.Stop() })
	base := "http://" + addr

	prefix := newCode(t)
	std, flash := prefix+"s", prefix+"f"
	wrong := []string{"Bearer wrong-" + token[:10], "Bearer " + token + "x", token, "Bearer " + strings.ToUpper(token)}
	for _, auth := range wrong {
		r := sendHostile(t, base, token, hostileCase{method: http.MethodGet, path: "/admin/vouchers/" + std, auth: auth})
		assert.Equal(t, http.StatusUnauthorized, r.Status, "auth %q: %s", auth, r.Raw)
	}
	create := func(code string, flash bool) {
		s := spec(code, 5, 1, flash)
		buf, _ := json.Marshal(s)
		r := sendHostile(t, base, token, hostileCase{method: http.MethodPost, path: "/admin/vouchers", body: buf})
		require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	}
	create(std, false)
	create(flash, true) // logs: created but not loaded into Redis
	r := sendHostile(t, base, token, hostileCase{method: http.MethodPost, path: "/vouchers/" + std + "/reservations",
		body: hostileClaim("1", `"`+prefix+`-o1"`, "5000")})
	require.Equal(t, http.StatusCreated, r.Status, r.Raw)
	r = sendHostile(t, base, token, hostileCase{method: http.MethodPost, path: "/vouchers/" + flash + "/reservations",
		body: hostileClaim("1", `"`+prefix+`-o2"`, "5000")})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Raw) // logs: request failed
	r = sendHostile(t, base, token, hostileCase{method: http.MethodPost, path: "/admin/vouchers/" + flash + "/warmup"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Raw)

	require.NoError(t, led.Stop()) // flush: every line is in
	logs := led.Logs()
	require.Contains(t, logs, flash, "the ledger's logs should mention the flash voucher; got:\n%s", logs)
	for _, secret := range append([]string{token, token[:16]}, wrong...) {
		if strings.Contains(logs, secret) {
			t.Errorf("ledger logs contain %q:\n%s", secret, logs)
		}
	}
}

// TestLedgerMetricsBoundedUnderHostileMethods: made-up HTTP methods must not
// each grow /metrics by a series (flashgate_http_request_duration_seconds is
// labelled by method), or a client can exhaust the ledger's memory and the
// scraper's.
func TestLedgerMetricsBoundedUnderHostileMethods(t *testing.T) {
	t.Parallel()
	l := newTestLedger(t, ledgerOptions{noRedis: true})
	h := (&Server{ledger: l.led, metrics: httpx.NewMetrics("ledger"), ready: func(c *gin.Context) error { return l.store.Ping(c) }}).Handler()
	base, _ := serveHostile(t, h)
	checkMetricsMethodsBounded(t, base, "/vouchers/x/reservations")
}

// checkMetricsMethodsBounded sends 40 requests with made-up methods to path and
// asserts /metrics holds at most the standard methods as label values.
func checkMetricsMethodsBounded(t *testing.T, base, path string) {
	t.Helper()
	for i := range 40 {
		r := sendHostile(t, base, "", hostileCase{method: fmt.Sprintf("M%03dX", i), path: path, auth: "-"})
		if r.Status < 400 || r.Status > 499 {
			t.Errorf("method M%03dX = %d, want a 4xx", i, r.Status)
		}
	}
	r := sendHostile(t, base, "", hostileCase{method: http.MethodGet, path: "/metrics", auth: "-"})
	require.Equal(t, http.StatusOK, r.Status)
	methods := map[string]bool{}
	for _, m := range regexp.MustCompile(`method="([^"]*)"`).FindAllStringSubmatch(r.Raw, -1) {
		methods[m[1]] = true
	}
	if len(methods) > 10 {
		t.Errorf("/metrics has %d distinct method labels after 40 made-up methods, want the standard ones only", len(methods))
	}
}
