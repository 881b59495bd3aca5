package client_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/flashgate/flashgate/shared/testkit/devstacktest"
	"github.com/flashgate/flashgate/shared/testkit/httpxtest"
)

// The stack every test and example of this package calls: a ledger and a
// proxy (with PROXY_TOKEN set) on their own Redis and Postgres.
var stack *devstacktest.Flashgate

const (
	ledgerToken = "ledger-secret"
	proxyToken  = "proxy-secret"
)

func TestMain(m *testing.M) {
	var err error
	stack, err = devstacktest.StartFlashgate(devstacktest.FlashgateOptions{
		LedgerToken: ledgerToken, ProxyToken: proxyToken, Log: io.Discard, // a failed start shows the logs' tail
		ProxyEnv: []string{"LEDGER_TIMEOUT=1s"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Every answer a client built without an http.Client gets (the examples'
	// among them) is validated against openapi.yaml, beside validated's.
	spec := httpxtest.NewRunChecker()
	http.DefaultTransport = spec.Transport(http.DefaultTransport)
	code := devstacktest.RunTests(m)
	stack.Stop()
	for _, f := range spec.Failures() {
		fmt.Fprintln(os.Stderr, "openapi.yaml:", f)
		code = 1
	}
	os.Exit(code)
}
