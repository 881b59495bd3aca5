package jobs

import (
	"context"
	"sync"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/gate"
)

// reconcileFullEvery: every this many runs of ReconcileAll (the first one
// included), every live voucher is reconciled, whatever the marks say.
const reconcileFullEvery = 10

// A cleanMark is what a voucher looked like right after a reconcile found
// Redis holding exactly the database's orders: the voucher row's version and
// Redis's fingerprint. While both are the same, nothing has happened to the
// voucher since, and ReconcileAll skips it: a pass over a voucher walks every
// order it holds, and a sale day's finished vouchers hold most of the day's
// orders.
type cleanMark struct {
	version string
	redis   gate.Fingerprint
}

// cleanMarks are one ledger's marks, by voucher code, and its count of runs.
type cleanMarks struct {
	mu   sync.Mutex
	m    map[string]cleanMark
	runs int
}

// nextRun counts a run of ReconcileAll and says whether it is a full one.
func (c *cleanMarks) nextRun() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs++
	return c.runs%reconcileFullEvery == 1
}

func (c *cleanMarks) get(code string) (cleanMark, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[code]
	return m, ok
}

func (c *cleanMarks) set(code string, m cleanMark) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cleanMark{}
	}
	c.m[code] = m
}

func (c *cleanMarks) forget(code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, code)
}

// keep drops the marks of vouchers that are no longer live.
func (c *cleanMarks) keep(live []store.LiveVersion) {
	c.mu.Lock()
	defer c.mu.Unlock()
	codes := make(map[string]bool, len(live))
	for _, lv := range live {
		codes[lv.Code] = true
	}
	for code := range c.m {
		if !codes[code] {
			delete(c.m, code)
		}
	}
}

// unchanged says whether lv is as its clean mark left it: same row version,
// same Redis fingerprint. Without a mark, or when Redis does not answer, it is
// not.
func (j *Jobs) unchanged(ctx context.Context, lv store.LiveVersion) bool {
	mark, ok := j.clean.get(lv.Code)
	if !ok || mark.version != lv.Version {
		return false
	}
	fp, err := j.gate.Fingerprint(ctx, lv.Code)
	return err == nil && fp == mark.redis
}

// markIfClean records lv's mark after rep, a reconcile that read the database
// after lv.Version was read: when Redis came out holding exactly the
// database's orders (nothing reloaded, no admission left waiting for its
// grace), lv.Version and Redis's fingerprint now. Every race goes toward a
// full pass: a row changed since lv was read has another version at the next
// run, and an order admitted after the fingerprint was read changes it.
func (j *Jobs) markIfClean(ctx context.Context, lv store.LiveVersion, rep Report) {
	if rep.Reloaded || rep.RedisRemainingAfter != rep.DBRemaining {
		j.clean.forget(lv.Code)
		return
	}
	fp, err := j.gate.Fingerprint(ctx, lv.Code)
	if err != nil || !fp.Loaded {
		j.clean.forget(lv.Code)
		return
	}
	j.clean.set(lv.Code, cleanMark{version: lv.Version, redis: fp})
}
