package systemtest

import (
	"sync"
	"testing"

	"github.com/flashgate/flashgate/shared/agreement/agreementtest"
)

// agreementChecks is what a stack checks when its test ends (issue 22,
// DESIGN.md principle 5): every flash voucher the test created agrees between
// Redis and the database, and the ledger process, whose reconciler is off
// (RECONCILE_INTERVAL=1h; its ReconcileInherited still runs every second),
// repaired nothing: its /metrics counts no repair and the audit holds none for
// these vouchers.
type agreementChecks struct {
	mu       sync.Mutex
	flash    []string
	repairOK string // why repairs are expected; empty: a repair fails the test
	done     bool   // checked already (a test that stops its ledger checks first)
}

// trackFlash adds a flash voucher to the checks at the end of the test.
func (s *stack) trackFlash(code string) {
	s.checks.mu.Lock()
	defer s.checks.mu.Unlock()
	s.checks.flash = append(s.checks.flash, code)
}

// allowRepairs is for a test that destroys Redis' data on purpose: a repair
// is then expected, and only agreement after the recovery is checked.
func (s *stack) allowRepairs(why string) {
	s.checks.mu.Lock()
	defer s.checks.mu.Unlock()
	s.checks.repairOK = why
}

// repairsAllowed is why repairs are expected; empty when they are not.
func (s *stack) repairsAllowed() string {
	s.checks.mu.Lock()
	defer s.checks.mu.Unlock()
	return s.checks.repairOK
}

// noAgreement is for a test that ends with Redis gone for good (killed, not
// restarted): there is no Redis state left to agree. why says so.
func (s *stack) noAgreement(string) {
	s.checks.mu.Lock()
	defer s.checks.mu.Unlock()
	s.checks.done = true
}

// requireAgreement runs the checks; newStack registers it as a cleanup that
// runs while the ledger process still serves.
func (s *stack) requireAgreement(tb testing.TB) {
	tb.Helper()
	s.checks.mu.Lock()
	codes, repairOK, done := append([]string(nil), s.checks.flash...), s.checks.repairOK, s.checks.done
	s.checks.done = true
	s.checks.mu.Unlock()
	if len(codes) == 0 || done {
		return
	}
	agreementtest.RequireAgreement(tb, s.rdb, s.pool, codes...)
	if repairOK != "" {
		return
	}
	agreementtest.RequireNoRepairMetrics(tb, s.LedgerURL+"/metrics")
	agreementtest.RequireNoRepairAudited(tb, s.pool, codes...)
}
