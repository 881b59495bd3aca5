package main

import (
	"testing"
)

// The checks every stack runs when its test ends: agreementtest.Checks
// (Redis agrees with Postgres on its own).

// trackFlash adds a flash voucher to the checks at the end of the test.
func (s *stack) trackFlash(code string) { s.checks.Track(code) }

// allowRepairs is for a test that destroys Redis' data on purpose: a repair
// is then expected, and only agreement after the recovery is checked.
func (s *stack) allowRepairs(why string) { s.checks.AllowRepairs(why) }

// noAgreement is for a test that ends with Redis gone for good (killed, not
// restarted), or that checked agreement itself: why says which.
func (s *stack) noAgreement(why string) { s.checks.Skip(why) }

// requireAgreement runs the checks; newStack registers it as a cleanup that
// runs while the ledger process still serves.
func (s *stack) requireAgreement(tb testing.TB) {
	tb.Helper()
	s.checks.Run(tb, s.rdb, s.pool, s.LedgerURL+"/metrics")
}
