package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// The stack every test drives: a ledger and a proxy on their own Redis and
// Postgres. The ledger delivers its events to a webhook that always fails,
// after one attempt, so that every event is parked and events failed and
// retry have something to show.
var stack *devstacktest.Flashgate

const (
	ledgerToken = "ctl-secret"
	viewerToken = "viewer-secret" // scope read only
)

func TestMain(m *testing.M) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down for the test", http.StatusInternalServerError)
	}))
	var err error
	stack, err = devstacktest.StartFlashgate(devstacktest.FlashgateOptions{
		LedgerToken: ledgerToken, Log: io.Discard, // a failed start shows the logs' tail
		LedgerEnv: []string{
			"LEDGER_TOKENS=viewer:" + viewerToken + ":read",
			"WEBHOOK_URLS=" + sink.URL + "/hook", "WEBHOOK_SECRET=flashgatectl-test-secret",
			"WEBHOOK_MAX_ATTEMPTS=1", "WEBHOOK_BACKOFF=50ms", "WEBHOOK_TIMEOUT=1s",
		},
	})
	if err != nil {
		sink.Close()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Every answer the commands get (their client uses http.DefaultTransport)
	// is validated against openapi.yaml.
	spec := httpxtest.NewRunChecker()
	http.DefaultTransport = spec.Transport(http.DefaultTransport)
	code := devstacktest.RunTests(m)
	stack.Stop()
	sink.Close()
	os.Exit(code | specFailures(spec))
}

// specFailures prints the answers that broke openapi.yaml: 1 if any.
func specFailures(spec *httpxtest.RunChecker) int {
	fails := spec.Failures()
	for _, f := range fails {
		fmt.Fprintln(os.Stderr, "openapi.yaml:", f)
	}
	if len(fails) > 0 {
		return 1
	}
	return 0
}

// result is one run of the command tree.
type result struct {
	code           int
	stdout, stderr string
}

// terminal says how a run's confirmation is answered: nil is no terminal
// (as in a script), else the line the operator types.
type terminal *string

func typed(line string) terminal { return &line }

// ctl runs flashgatectl in process against the stack, with its ledger and
// token in the environment, as a script would (no terminal).
func ctl(t *testing.T, args ...string) result {
	t.Helper()
	return ctlAt(t, nil, args...)
}

// ctlAt is ctl on a terminal where the operator types *tty at the question.
func ctlAt(t *testing.T, tty terminal, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if tty == nil {
		return runCtl(ctx, strings.NewReader(""), false, args...)
	}
	return runCtl(ctx, strings.NewReader(*tty+"\n"), true, args...)
}

// runCtl runs the command tree with stdin, on a terminal or not, until ctx ends.
func runCtl(ctx context.Context, stdin io.Reader, onTerminal bool, args ...string) result {
	var stdout, stderr strings.Builder
	a := &app{
		stdin: stdin, stdout: &stdout, stderr: &stderr, now: time.Now,
		getenv: func(k string) string {
			return map[string]string{envLedger: stack.LedgerURL, envToken: ledgerToken}[k]
		},
		interactive: func() bool { return onTerminal },
	}
	code := a.run(ctx, args)
	return result{code, stdout.String(), stderr.String()}
}

// requireOK fails unless r exited 0.
func requireOK(t *testing.T, r result) result {
	t.Helper()
	require.Equal(t, exitOK, r.code, "exit code; stderr: %s", r.stderr)
	return r
}

// requireAgreementAtEnd checks, when t ends, that the stack's Redis and
// database agree about the flash voucher code and that the ledger, whose
// reconciler is off, repaired nothing: a reconcile the commands ran found
// nothing to fix.
func requireAgreementAtEnd(t *testing.T, code string) {
	t.Helper()
	agreementtest.AtEnd(t, stack.RedisURL(), stack.DatabaseURL(), stack.LedgerURL, code)
}
