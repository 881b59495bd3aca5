package api

// ReconcileReport is the answer of POST RouteReconcile: one flash voucher's
// Redis state against the database, before and after the reconcile.
type ReconcileReport struct {
	Code                string `json:"code"`
	DBRemaining         int64  `json:"dbRemaining"`
	RedisRemaining      int64  `json:"redisRemaining"`      // before
	RedisRemainingAfter int64  `json:"redisRemainingAfter"` // after
	Drift               int64  `json:"drift"`               // redisRemaining - dbRemaining, before
	Released            int    `json:"released"`            // hanging admissions freed in Redis
	Restored            int    `json:"restored"`            // database-active orders put back into Redis
	Reloaded            bool   `json:"reloaded"`            // Redis did not hold the voucher: loaded from the database
}
