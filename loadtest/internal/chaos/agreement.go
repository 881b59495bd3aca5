package chaos

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/loadtest/internal/verify"
	"github.com/flashgate/flashgate/shared/agreement"
	"github.com/flashgate/flashgate/shared/api"
)

// The agreement invariants: at the end of a
// scenario Redis holds exactly what the database's rows imply, and, in a
// scenario that keeps Redis' data, no reconcile had to repair anything for it.
const (
	checkAgreement           = "Redis = Postgres without the reconciler"
	checkAgreementReconciled = "Redis = Postgres, the reconciler on"
	checkNoRepair            = "no reconcile repaired anything"
	checkRepairsReported     = "reconcile repairs (reported, allowed)"
)

// agreementShown is how many of a Diff's problems a check's detail lists.
const agreementShown = 8

// agreementChecks ends a scenario's checks: Redis = Postgres on every code
// (agreement.Compare, polled until they all agree or deadline has passed),
// then the reconcile repairs: in a scenario without the reconciler any repair
// fails it, in one with it they are reported.
func (r *rig) agreementChecks(ctx context.Context, deadline time.Time, codes ...string) []verify.Check {
	return []verify.Check{agreementCheck(ctx, r.bench, deadline, r.reconciler, codes...), r.repairCheck(ctx, codes...)}
}

// agreementCheck polls agreement.Compare on codes until every one agrees or
// deadline has passed (at least once), and reports the Diffs still open.
func agreementCheck(ctx context.Context, b *verify.Bench, deadline time.Time, reconciler string, codes ...string) verify.Check {
	name, how := checkAgreement, "the ledger's periodic reconciler off (RECONCILE_INTERVAL=1h)"
	if reconciler != "" {
		name, how = checkAgreementReconciled, "the reconciler on: "+reconciler
	}
	start := time.Now()
	var open []string
	for {
		open = open[:0]
		for _, code := range codes {
			if line := compareOne(ctx, b, code); line != "" {
				open = append(open, line)
			}
		}
		if len(open) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		load.Sleep(ctx, settlePolling)
	}
	if len(open) == 0 {
		return verify.Check{Name: name, Pass: true, Detail: fmt.Sprintf(
			"%d flash vouchers: remaining, orders, per-customer counts and terms in Redis exactly what the database's rows imply (agreement.Compare), %.2f s after the checks began; %s",
			len(codes), time.Since(start).Seconds(), how)}
	}
	return verify.Check{Name: name, Pass: false, Detail: fmt.Sprintf(
		"%d of %d flash vouchers still disagree %.2f s after the checks began (Redis agrees with Postgres on its own; %s): %s",
		len(open), len(codes), time.Since(start).Seconds(), how, strings.Join(open, "; "))}
}

// compareOne is "" when Redis and the database agree on code, or the Diff
// (its first agreementShown problems) or the error that reading them gave.
func compareOne(ctx context.Context, b *verify.Bench, code string) string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := b.Agreement(cctx, code)
	switch {
	case err != nil:
		return code + ": " + err.Error()
	case d.OK():
		return ""
	}
	shown := d.Problems[:min(len(d.Problems), agreementShown)]
	more := ""
	if n := len(d.Problems) - len(shown); n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	return fmt.Sprintf("%s: %d problems: %s%s", code, len(d.Problems), strings.Join(shown, " | "), more)
}

// repairCheck reads what the reconcilers repaired: each ledger's repair
// counters (a ledger restarted during the scenario counts from its restart
// only) and the database's reconcile audit of codes (which every repair of one
// of them writes, whichever ledger made it). Without the reconciler any repair
// fails the scenario; with it they are reported, unless the scenario's
// repairs fail it all the same (Scenario.RepairsFail).
func (r *rig) repairCheck(ctx context.Context, codes ...string) verify.Check {
	var found, unread []string
	for _, u := range r.ledgerURLs {
		lines, err := readRepairMetrics(ctx, u)
		if err != nil {
			unread = append(unread, err.Error())
		}
		found = append(found, lines...)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	audited, err := r.bench.Repairs(actx, codes...)
	cancel()
	if err != nil {
		unread = append(unread, err.Error())
	}
	for _, a := range audited {
		found = append(found, "audited: "+a)
	}
	detail := fmt.Sprintf("%d ledgers' %s and the reconcile audit of %d vouchers: %d counters above 0, %d audited repairs%s%s",
		len(r.ledgerURLs), strings.Join(agreement.RepairMetrics, ", "), len(codes), len(found)-len(audited), len(audited),
		listed(found), unreadable(unread))
	switch {
	case r.reconciler != "" && r.repairsFail:
		return verify.Check{Name: checkNoRepair, Pass: len(found) == 0 && len(unread) == 0,
			Detail: detail + "; the reconciler is on (" + r.reconciler + "), and a repair means it freed or restored what the system had right"}
	case r.reconciler != "":
		return verify.Check{Name: checkRepairsReported, Pass: true, Detail: detail + "; allowed: " + r.reconciler}
	}
	return verify.Check{Name: checkNoRepair, Pass: len(found) == 0 && len(unread) == 0,
		Detail: detail + "; the reconciler is off, and a repair means Redis drifted from the database (Redis agrees with Postgres on its own)"}
}

// readRepairMetrics returns the lines of the ledger at ledgerURL's /metrics
// that count a repair (a repair counter above 0).
func readRepairMetrics(ctx context.Context, ledgerURL string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lines, err := agreement.MetricRepairs(ctx, http.DefaultClient, ledgerURL+api.MetricsPath)
	for i, l := range lines {
		lines[i] = ledgerURL + ": " + l
	}
	return lines, err
}

func listed(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	shown := lines[:min(len(lines), agreementShown)]
	more := ""
	if n := len(lines) - len(shown); n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	return ": " + strings.Join(shown, "; ") + more
}

func unreadable(errs []string) string {
	if len(errs) == 0 {
		return ""
	}
	return "; could not read: " + strings.Join(errs, "; ")
}

// driftDetail says which of the burst's orders Redis holds without an active
// row (or the reverse) and what their clients were told, so that a failed
// agreement check names the path that left the two apart: "" when none.
func (t *traffic) driftDetail(ctx context.Context, b *verify.Bench) string {
	plan, shots := t.rc.Merge(t.plan, t.volley.Shots)
	st, loaded, err := b.RedisState(ctx, t.spec.Code)
	if err != nil || !loaded {
		return ""
	}
	d, err := b.DBState(ctx, t.spec.Code)
	if err != nil {
		return ""
	}
	inRedis := map[string]bool{}
	var held, rowOnly []string
	for _, o := range st.Orders {
		inRedis[o.OrderID] = true
		if _, ok := d.Active[o.OrderID]; !ok {
			held = append(held, o.OrderID)
		}
	}
	for id := range d.Active {
		if !inRedis[id] {
			rowOnly = append(rowOnly, id)
		}
	}
	if len(held)+len(rowOnly) == 0 {
		return ""
	}
	index := map[string]int32{}
	for i, o := range plan.Orders {
		index[o.ID] = int32(i)
	}
	sent := map[int32][]load.Shot{}
	for _, s := range shots {
		if s.Req >= 0 && int(s.Req) < len(plan.Requests) {
			sent[plan.Requests[s.Req]] = append(sent[plan.Requests[s.Req]], s)
		}
	}
	answers := map[string]int{}
	retrying, resent := 0, 0
	for _, id := range held {
		ss := sent[index[id]]
		if strings.Contains(id, ".r") {
			retrying++
		}
		if len(ss) > 1 {
			resent++
		}
		var last []string
		for _, s := range ss {
			last = append(last, load.StatusKey(s))
		}
		if len(last) == 0 {
			// A transport error carries no order (Shot.Req < 0): cut or never answered.
			last = append(last, "no answer")
		}
		answers[strings.Join(last, " then ")]++
	}
	o := verify.Outcome{Plan: plan, Shots: shots}
	return fmt.Sprintf(". Burst voucher (the fault from %.2f s to %.2f s): %d orders held in Redis with no active row (%d of the retrying clients', %d sent more than once; answered: %s)%s; %d active rows Redis does not hold%s",
		t.faultStart.Sub(t.start).Seconds(), t.faultEnd.Sub(t.start).Seconds(), len(held), retrying, resent, verify.StatusList(answers), histories(o, held), len(rowOnly), histories(o, rowOnly))
}
