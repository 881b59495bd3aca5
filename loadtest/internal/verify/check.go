// Package verify judges a burst: the Bench it runs against (the ledger that
// creates its voucher, the database and Redis read back afterwards), the
// checks of the invariants, the report that shows them, and the ladder that
// climbs to the highest rate a path sustains.
package verify

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/flashgate/flashgate/loadtest/internal/load"
	"github.com/flashgate/flashgate/shared/gate"
)

// Check is the verdict on one invariant.
type Check struct {
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Detail string `json:"detail"`
}

// Outcome is what the database and Redis held after a burst, next to what the
// clients were told.
type Outcome struct {
	Spec   VoucherSpec
	Plan   load.Plan
	Shots  []load.Shot
	DB     DBState
	Redis  *gate.State // nil for a standard voucher
	Errors int         // shots that failed (no answer, or not 2xx/409/422)
}

// clientView is what the answers said, per order of the plan.
type clientView struct {
	admitted  map[int32]bool // orders answered 201 at least once
	refused   map[int32]bool // orders answered 409 or 422 at least once
	bodies201 []string       // orderId of every 201 body, as the server wrote it
	wrongBody []string       // 201 bodies naming another order than the one sent
}

func viewOf(p load.Plan, shots []load.Shot) clientView {
	v := clientView{admitted: map[int32]bool{}, refused: map[int32]bool{}}
	for _, s := range shots {
		if s.Req < 0 || int(s.Req) >= len(p.Requests) {
			continue
		}
		o := p.Requests[s.Req]
		switch s.Status {
		case http.StatusCreated:
			v.admitted[o] = true
			v.bodies201 = append(v.bodies201, s.OrderID)
			if s.OrderID != p.Orders[o].ID {
				v.wrongBody = append(v.wrongBody, fmt.Sprintf("sent %s, got %q", p.Orders[o].ID, s.OrderID))
			}
		case http.StatusConflict, http.StatusUnprocessableEntity:
			v.refused[o] = true
		}
	}
	return v
}

// Checks judges the invariants of a burst. When some requests failed (e errors)
// a client may not know of an admission the system made, so the counts that
// depend on every answer are checked as bounds: each failed request can hide at
// most one admission. Never-oversell checks hold exactly whatever failed.
func Checks(o Outcome) []Check {
	v := viewOf(o.Plan, o.Shots)
	admitted, e := len(v.admitted), o.Errors
	active := len(o.DB.Active)
	tolerance := ""
	if e > 0 {
		tolerance = fmt.Sprintf(" (%d failed requests: checked as a bound)", e)
	}

	demand := o.Plan.Demand(o.Spec.PerUser)
	want := min(o.Spec.Stock, demand)
	cs := []Check{
		NewCheck("admitted = min(stock, demand)", within(admitted, want-e, want),
			"%d orders admitted (answered 201), want %d = min(stock %d, demand %d)%s",
			admitted, want, o.Spec.Stock, demand, tolerance),
		NewCheck("no oversell", o.DB.Used <= o.DB.TotalLimit && active <= o.DB.TotalLimit && admitted <= o.Spec.Stock,
			"used_count %d, active rows %d, admitted %d, total_limit %d",
			o.DB.Used, active, admitted, o.DB.TotalLimit),
		NewCheck("DB active rows = admitted", within(active, admitted, admitted+e),
			"%d RESERVED/CONFIRMED rows, %d orders answered 201%s", active, admitted, tolerance),
		NewCheck("used_count = active rows", o.DB.Used == active,
			"used_count %d, active rows %d (rows by status: %s)", o.DB.Used, active, StatusList(o.DB.ByStatus)),
		customerLimitCheck(o, v),
		rowsCheck(o, v),
	}

	var mixed []string
	for ord := range v.admitted {
		if v.refused[ord] {
			mixed = append(mixed, o.Plan.Orders[ord].ID)
		}
	}
	cs = append(cs, NewCheck("retries answered alike", len(mixed) == 0,
		"%d retries; %d orders got both a 201 and a refusal%s", o.Plan.Retries, len(mixed), Sample(mixed)))
	if o.Spec.Flash {
		cs = append(cs, redisCheck(o, tolerance))
	}
	return cs
}

// NewCheck is the check name, passed or not, its detail formatted.
func NewCheck(name string, pass bool, format string, args ...any) Check {
	return Check{Name: name, Pass: pass, Detail: fmt.Sprintf(format, args...)}
}

func within(got, lo, hi int) bool { return lo <= got && got <= hi }

// customerLimitCheck: no customer holds more uses than the per-user limit, in
// the rows, in voucher_customer_usage or in the answers.
func customerLimitCheck(o Outcome, v clientView) Check {
	perDB := map[int64]int{}
	for _, c := range o.DB.Active {
		perDB[c]++
	}
	perClient := map[int64]int{}
	for ord := range v.admitted {
		perClient[o.Plan.Orders[ord].Customer]++
	}
	maxDB, maxClient := maxValue(perDB), maxValue(perClient)
	return NewCheck("no customer above its limit",
		maxDB <= o.Spec.PerUser && maxClient <= o.Spec.PerUser && o.DB.MaxUsage <= o.Spec.PerUser,
		"most uses per customer: %d in rows, %d in voucher_customer_usage, %d answered 201; limit %d",
		maxDB, o.DB.MaxUsage, maxClient, o.Spec.PerUser)
}

// rowsCheck: every order answered 201, and every orderId a 201 body named,
// has an active row for the same order and customer.
func rowsCheck(o Outcome, v clientView) Check {
	var missing []string
	for ord := range v.admitted {
		want := o.Plan.Orders[ord]
		if c, ok := o.DB.Active[want.ID]; !ok || c != want.Customer {
			missing = append(missing, want.ID)
		}
	}
	for _, id := range v.bodies201 {
		if _, ok := o.DB.Active[id]; !ok {
			missing = append(missing, id)
		}
	}
	missing = append(missing, v.wrongBody...)
	return NewCheck("every 201 has its DB row", len(missing) == 0,
		"%d answers 201 for %d orders; %d without an active row for the same order and customer%s",
		len(v.bodies201), len(v.admitted), len(missing), Sample(missing))
}

// redisCheck: a flash voucher's Redis counter and orders agree with the
// database, within the failed requests.
func redisCheck(o Outcome, tolerance string) Check {
	const name = "Redis remaining = DB remaining"
	if o.Redis == nil {
		return NewCheck(name, false, "the voucher is not loaded in Redis")
	}
	// A failed request may leave an admission in Redis whose row was never
	// written (until the reconciler frees it): Redis may then be lower.
	dbRemaining, active, e := o.DB.TotalLimit-o.DB.Used, len(o.DB.Active), o.Errors
	r, orders := int(o.Redis.Remaining), len(o.Redis.Orders)
	return NewCheck(name, within(r, dbRemaining-e, dbRemaining) && within(orders, active, active+e),
		"Redis remaining %d, DB remaining %d (total_limit - used_count); orders in Redis %d, active rows %d%s",
		r, dbRemaining, orders, active, tolerance)
}

// RedisRemaining is what Redis holds as remaining, or nil when the voucher is
// not loaded there.
func (o Outcome) RedisRemaining() *int64 {
	if o.Redis == nil {
		return nil
	}
	return &o.Redis.Remaining
}

// Passed reports whether every check passed.
func Passed(cs []Check) bool {
	for _, c := range cs {
		if !c.Pass {
			return false
		}
	}
	return true
}

func maxValue(m map[int64]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}

// StatusList formats counts by status as "A 3, B 1", sorted; "none" when empty.
func StatusList(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Sample formats up to three items of a list of offenders.
func Sample(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	sort.Strings(ids)
	return ", e.g. " + strings.Join(ids[:min(3, len(ids))], ", ")
}
