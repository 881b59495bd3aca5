package ledgertest

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flashgate/flashgate/ledger/internal/jobs"
	"github.com/flashgate/flashgate/shared/testkit/agreementtest"
)

// AgreementChecks is what a Ledger checks when its test ends (Redis agrees
// with Postgres on its own): every flash voucher the test created agrees
// between Redis and the database, and no reconcile repaired one of them. The ledger's
// jobs never Run in these tests (the reconciler is off), so a test that drifts
// Redis is caught by the agreement check, and one that called Reconcile and
// got a repair is caught by the jobs' metrics and the audit.
type AgreementChecks struct {
	mu       sync.Mutex
	flash    []string
	jobs     []*jobs.Jobs
	repairOK string // why repairs are expected; empty: a repair fails the test
}

// AddFlash and AddJobs do nothing on a Ledger built by hand around a
// ledger process (no checks).
func (c *AgreementChecks) AddFlash(code string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flash = append(c.flash, code)
}

func (c *AgreementChecks) AddJobs(j *jobs.Jobs) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobs = append(c.jobs, j)
}

// TrackFlash adds a flash voucher the test created without CreateVoucher.
func (l *Ledger) TrackFlash(code string) { l.Checks.AddFlash(code) }

// AllowRepairs is for a test that destroys Redis' data on purpose (or tests
// the reconciler itself): a repair is then expected, and only agreement after
// the recovery is checked. why says what the test destroys.
func (l *Ledger) AllowRepairs(why string) {
	l.Checks.mu.Lock()
	defer l.Checks.mu.Unlock()
	l.Checks.repairOK = why
}

// requireAgreement is the check at the end of every test with a Ledger.
func (l *Ledger) requireAgreement(tb testing.TB) {
	tb.Helper()
	c := l.Checks
	c.mu.Lock()
	codes, js, repairOK := append([]string(nil), c.flash...), append([]*jobs.Jobs(nil), c.jobs...), c.repairOK
	c.mu.Unlock()
	if l.RDB == nil || len(codes) == 0 {
		return
	}
	agreementtest.RequireAgreement(tb, l.RDB, l.Pool, codes...)
	if repairOK != "" {
		return
	}
	for _, j := range js {
		for _, kind := range []string{"released", "restored", "reloaded"} {
			if n := testutil.ToFloat64(j.Config.Metrics.ReconcileFixes.WithLabelValues(kind)); n != 0 {
				tb.Errorf("the reconciler %s %v (flashgate_reconcile_fixes_total): Redis had drifted from the database", kind, n)
			}
		}
	}
	agreementtest.RequireNoRepairAudited(tb, l.Pool, codes...)
}
