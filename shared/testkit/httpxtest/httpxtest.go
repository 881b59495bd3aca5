// Package httpxtest is test support for the two gin services, the ledger and the
// proxy. Both are package main and cannot import each other's tests, so what
// their tests share lives here: plain HTTP calls, unique voucher codes, the
// hostile-request table and its runner, and the checks of /metrics and the
// OpenAPI document against what a service really serves.
//
// Only _test.go files may import it.
package httpxtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/api"
)

// Reply is a decoded response.
type Reply struct {
	Status int
	Body   map[string]any // the JSON body, nil when there is none
	Raw    string
	Header http.Header
}

// Code is the error code of an error reply, "" otherwise.
func (r Reply) Code() string { s, _ := r.Body["error"].(string); return s }

// Call sends body with client: a string or []byte is sent as is, anything else
// as JSON. A non-empty token is sent as a bearer token. A failed exchange is
// reported with tb.Errorf and returns the zero Reply. Every answer is
// validated against openapi.yaml (CheckAnswer): a test that talks to a
// service through Call checks the contract as a side effect.
func Call(tb testing.TB, client *http.Client, method, url, token string, body any) Reply {
	tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			tb.Errorf("marshal: %v", err)
			return Reply{}
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		tb.Errorf("request: %v", err)
		return Reply{}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set(api.HeaderAuthorization, "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Errorf("%s %s: %v", method, url, err)
		return Reply{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	CheckAnswer(tb, req, resp.StatusCode, resp.Header, raw)
	r := Reply{Status: resp.StatusCode, Raw: string(raw), Header: resp.Header}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &r.Body)
	}
	return r
}

var (
	codeSeq  atomic.Int64
	nonAlnum = regexp.MustCompile(`[^A-Za-z0-9]`)
)

// NewCode returns a voucher code unique to this test binary's run: the last
// nameLen letters and digits of the test's name (for reading logs), a clock
// reading and a counter. Codes are at most 32 bytes, so a service passes the
// longest name its tests' suffixes leave room for.
func NewCode(tb testing.TB, nameLen int) string {
	tb.Helper()
	name := nonAlnum.ReplaceAllString(tb.Name(), "")
	if len(name) > nameLen {
		name = name[len(name)-nameLen:]
	}
	return fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano()%1_000_000, codeSeq.Add(1))
}
