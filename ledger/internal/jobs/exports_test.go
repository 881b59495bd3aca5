package jobs

import "context"

// What the external tests (package jobs_test, on a whole ledger from
// ledgertest) reach inside the jobs for.
const (
	ReconcileFullEvery = reconcileFullEvery
	RepairRemaining    = repairRemaining
	RepairRestored     = repairRestored
	RepairReleased     = repairReleased
	RepairTerms        = repairTerms
)

// RepairKindNames is repairKindNames.
var RepairKindNames = repairKindNames

// ReconcileAll is reconcileAll.
func (j *Jobs) ReconcileAll(ctx context.Context) []Report { return j.reconcileAll(ctx) }
