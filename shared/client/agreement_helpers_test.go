package client_test

import (
	"testing"

	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
)

// requireAgreementAtEnd checks, when t ends, that the stack's Redis and
// database agree about the flash voucher code and that the stack's ledger,
// whose reconciler is off (RECONCILE_INTERVAL=1h), repaired nothing (issue 22,
// Redis agrees with Postgres on its own). The ledger's counters cover the whole package run,
// so a repair fails every later test too; the audit names the voucher.
func requireAgreementAtEnd(t *testing.T, code string) {
	t.Helper()
	agreementtest.AtEnd(t, stack.RedisURL(), stack.DatabaseURL(), stack.LedgerURL, code)
}
