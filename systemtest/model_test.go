package systemtest

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flashgate/flashgate/shared/voucher"
)

// linMaxOrders bounds the orderIds of one history (the state is two arrays).
const linMaxOrders = 32

type linKind uint8

const (
	linReserve linKind = iota + 1
	linConfirm
	linRelease
	linGet
)

var linKindNames = [...]string{linReserve: "reserve", linConfirm: "confirm", linRelease: "release", linGet: "get"}

// linOp is an operation's input. Customer matters for reserve only.
type linOp struct {
	Kind     linKind
	Customer uint8 // 1-based customer id
	Order    uint8 // index of the orderId
	// Contested marks a reserve that overlapped in time with another
	// customer's reserve of the same orderId (see markContested).
	Contested bool
	// Call and Return are the operation's own times (nanoseconds on the
	// history's clock), for the sold-out flag's time window.
	Call, Return int64
}

// linResult is an operation's output. Status 0 is an indeterminate outcome
// (transport error, timeout, 5xx): the call may or may not have taken effect.
type linResult struct {
	Status   int
	Code     string // the error code; with 200 from confirm or get, the reservation's status
	Customer uint8  // get: the reservation's customer
}

func (r linResult) indeterminate() bool { return r.Status == 0 }

// Order states in the model.
const (
	ordNone uint8 = iota
	ordReserved
	ordConfirmed
	ordReleased
)

var ordNames = [...]string{ordNone: "-", ordReserved: "RESERVED", ordConfirmed: "CONFIRMED", ordReleased: "RELEASED"}

// linState is the voucher as the sequential model sees it: each orderId's
// status and customer, and when it last became active (the Return time of the
// call that made it so: the latest its admission in Redis can have been).
// used and the per-customer counts are derived from it. It is a comparable
// value, so == is state equality.
type linState struct {
	status   [linMaxOrders]uint8
	owner    [linMaxOrders]uint8
	activeAt [linMaxOrders]int64
}

func (s linState) active(o uint8) bool {
	return s.status[o] == ordReserved || s.status[o] == ordConfirmed
}

func (s linState) used() int {
	n := 0
	for o := range s.status {
		if s.active(uint8(o)) {
			n++
		}
	}
	return n
}

func (s linState) activeOf(c uint8) int {
	n := 0
	for o := range s.status {
		if s.owner[o] == c && s.active(uint8(o)) {
			n++
		}
	}
	return n
}

// voucherSpec is the voucher a history runs against.
type voucherSpec struct {
	stock, perUser int
	// exact: every refusal must be justified by the state, as for a standard
	// voucher, whose reserve is one guarded transaction in the database.
	// Without it (flash vouchers, admitted by Redis first) the refusals the gate
	// gives are allowed whatever the counts say, within the limits that
	// linearizabilityModel describes.
	exact bool
	// flagWindow is how long after an order became active the proxy's
	// sold-out flag may still refuse its retries (see linearizabilityModel).
	flagWindow time.Duration
}

// linearizabilityModel is the sequential specification of one voucher with
// spec.stock uses and spec.perUser uses per customer.
//
// State: orderId -> {customer, RESERVED | CONFIRMED | RELEASED}; used is the
// number of active (RESERVED or CONFIRMED) orders, active(c) the active orders
// of customer c. "fits(c)" below is used < stock && active(c) < perUser.
//
//	reserve(c, o)  new o:                 201 iff fits(c): o RESERVED for c
//	               o active for c:        201, no change (a retry)
//	               o of another customer: 409 ORDER_CONFLICT; flash: also for a
//	               new or released o when another customer's reserve of o was
//	               in flight at the time (Contested, see below), never for an
//	               o active for c
//	               o RELEASED for c:      409 RESERVATION_RELEASED
//	               409 OUT_OF_STOCK / ALREADY_USED change nothing. Exact: only
//	               for a new o, OUT_OF_STOCK iff used = stock and active(c) <
//	               perUser, ALREADY_USED iff active(c) = perUser. Flash: in any
//	               state except when o is active for c; then only OUT_OF_STOCK,
//	               and only within flagWindow of o becoming active (see below).
//	confirm(o)     RESERVED: 200 CONFIRMED. CONFIRMED: 200, no change.
//	               RELEASED: 409 RESERVATION_RELEASED (issue 12: an explicit
//	               release is final; the histories' releases are all explicit,
//	               as no reservation lives long enough to expire, so the
//	               late-payment rule of expired ones is not exercised here).
//	               unknown: 404 RESERVATION_NOT_FOUND.
//	release(o)     RESERVED: 204, RELEASED (the use is back). RELEASED: 204.
//	               CONFIRMED: 409 ALREADY_CONFIRMED. unknown: 404.
//	get(o)         200 {status, customerId}; 404 if unknown.
//
// Why refusals are free on a flash voucher: the design accepts undersell for a
// while. The proxy's sold-out flag answers OUT_OF_STOCK for up to SOLDOUT_TTL
// after stock came back through another path, and after a release Redis's
// counters catch up a moment after the database's; a reserve that Redis admits
// but the ledger refuses holds a Redis use for a moment. A released orderId is
// kept in Redis's done hash (issue 12), but a proxy's sold-out flag set before
// it was released elsewhere may refuse its retry until the change published
// by that release arrives (OUT_OF_STOCK instead of RESERVATION_RELEASED).
//
// The sold-out flag and a retry of an order that holds a use (flagged() in
// proxy/internal/admit/admit.go): the flag holds a snapshot of the orders Redis held at a
// moment it had no use left, and for SOLDOUT_TTL answers OUT_OF_STOCK to every
// order not in it, retries included. Redis admits after the snapshot only with
// a use given back after it; a release through this proxy drops the flag
// (Unflag), but a use can also come back without passing here (the ledger
// giving back a refused write's or a late confirm's admission, another proxy,
// the sweeper, or a release whose Unflag has not run yet), and the ledger's
// late-confirm admission is not behind the flag at all. So an order admitted
// after the snapshot can be refused until the flag expires, and that is the
// rule: OUT_OF_STOCK to reserve(c, o) with o active for c is allowed only if
// the call started less than flagWindow (SOLDOUT_TTL plus the Redis timeout,
// the longest a snapshot can be older than its flag) after the call that last
// made o active returned. Anything else (ALREADY_USED, or OUT_OF_STOCK later)
// means Redis lost an order the database holds: a bug.
//
// Why ORDER_CONFLICT needs Contested: the gate records an orderId for its
// customer when it admits it, before the ledger has written the row, and the
// proxy answers another customer's reserve of that orderId with
// ORDER_CONFLICT from Redis alone. Until the write commits, get / confirm /
// release (answered from the database) still say 404, and a write the
// database refuses (c's order released, say) leaves no row at all. So a
// conflict is justified by an order the model holds for another customer, or
// by another customer's claim in flight, which only the history can show: an
// ORDER_CONFLICT answer without either is a bug.
//
// Indeterminate outcomes: the call may have taken effect (as its success
// would have) or not; the nondeterministic step returns both states.
func linearizabilityModel(spec voucherSpec) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []any { return []any{linState{}} },
		Step: func(state, input, output any) []any {
			return spec.step(state.(linState), input.(linOp), output.(linResult))
		},
		Equal: func(a, b any) bool { return a.(linState) == b.(linState) },
		Hash: func(state any) uint64 {
			s := state.(linState)
			h := fnv.New64a()
			h.Write(s.status[:])
			h.Write(s.owner[:])
			var buf [8]byte
			for _, at := range s.activeAt {
				binary.LittleEndian.PutUint64(buf[:], uint64(at))
				h.Write(buf[:])
			}
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			return describeLinOp(input.(linOp), output.(linResult))
		},
		DescribeState: func(state any) string { return describeLinState(state.(linState)) },
	}
}

func (spec voucherSpec) step(s linState, op linOp, r linResult) []any {
	if !r.indeterminate() {
		if next, ok := spec.apply(s, op, r); ok {
			return []any{next}
		}
		return nil
	}
	next := []any{s} // it did not happen, or happened without changing anything
	var success linResult
	switch op.Kind {
	case linReserve:
		success = linResult{Status: http.StatusCreated}
	case linConfirm:
		success = linResult{Status: http.StatusOK, Code: string(voucher.Confirmed)}
	case linRelease:
		success = linResult{Status: http.StatusNoContent}
	default:
		return next
	}
	if n, ok := spec.apply(s, op, success); ok && n != s {
		next = append(next, n)
	}
	return next
}

// apply returns the state after op answered r, and whether the model allows r.
func (spec voucherSpec) apply(s linState, op linOp, r linResult) (linState, bool) {
	o := op.Order
	st, owner := s.status[o], s.owner[o]
	fits := func(c uint8) bool { return s.used() < spec.stock && s.activeOf(c) < spec.perUser }
	switch op.Kind {
	case linReserve:
		c := op.Customer
		switch {
		case r.Status == http.StatusCreated:
			if st == ordNone && fits(c) {
				s.status[o], s.owner[o], s.activeAt[o] = ordReserved, c, op.Return
				return s, true
			}
			return s, s.active(o) && owner == c
		case r.Status == http.StatusConflict && (r.Code == voucher.CodeOutOfStock || r.Code == voucher.CodeAlreadyUsed):
			if s.active(o) && owner == c { // a retry of an order that holds a use
				return s, !spec.exact && spec.flagWindow > 0 && r.Code == voucher.CodeOutOfStock &&
					op.Call < s.activeAt[o]+spec.flagWindow.Nanoseconds()
			}
			if !spec.exact {
				return s, true
			}
			if st != ordNone {
				return s, false
			}
			if r.Code == voucher.CodeAlreadyUsed {
				return s, s.activeOf(c) >= spec.perUser
			}
			return s, s.activeOf(c) < spec.perUser && s.used() >= spec.stock
		case r.Status == http.StatusConflict && r.Code == voucher.CodeOrderConflict:
			if op.Contested && !spec.exact {
				return s, !(s.active(o) && owner == c)
			}
			return s, st != ordNone && owner != c
		case r.Status == http.StatusConflict && r.Code == voucher.CodeReservationReleased:
			return s, st == ordReleased && owner == c
		}
	case linConfirm:
		switch {
		case r.Status == http.StatusNotFound && r.Code == voucher.CodeReservationNotFound:
			return s, st == ordNone
		case r.Status == http.StatusOK && r.Code == string(voucher.Confirmed):
			switch {
			case st == ordReserved:
				s.status[o] = ordConfirmed
				return s, true
			case st == ordConfirmed:
				return s, true
			}
		case r.Status == http.StatusConflict && r.Code == voucher.CodeReservationReleased:
			return s, st == ordReleased
		}
	case linRelease:
		switch {
		case r.Status == http.StatusNotFound && r.Code == voucher.CodeReservationNotFound:
			return s, st == ordNone
		case r.Status == http.StatusNoContent:
			if st == ordReserved {
				s.status[o] = ordReleased
				return s, true
			}
			return s, st == ordReleased
		case r.Status == http.StatusConflict && r.Code == voucher.CodeAlreadyConfirmed:
			return s, st == ordConfirmed
		}
	case linGet:
		switch {
		case r.Status == http.StatusNotFound && r.Code == voucher.CodeReservationNotFound:
			return s, st == ordNone
		case r.Status == http.StatusOK:
			return s, st != ordNone && ordNames[st] == r.Code && owner == r.Customer
		}
	}
	return s, false
}

func describeLinOp(op linOp, r linResult) string {
	var in string
	if op.Kind == linReserve {
		in = fmt.Sprintf("reserve(c%d, o%d)", op.Customer, op.Order)
		if op.Contested {
			in += "*"
		}
	} else {
		in = fmt.Sprintf("%s(o%d)", linKindNames[op.Kind], op.Order)
	}
	switch {
	case r.indeterminate():
		return in + " -> ?"
	case op.Kind == linGet && r.Status == http.StatusOK:
		return fmt.Sprintf("%s -> %s c%d", in, r.Code, r.Customer)
	case r.Code != "":
		return fmt.Sprintf("%s -> %d %s", in, r.Status, r.Code)
	}
	return fmt.Sprintf("%s -> %d", in, r.Status)
}

func describeLinState(s linState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "used %d:", s.used())
	for o, st := range s.status {
		if st != ordNone {
			fmt.Fprintf(&b, " o%d=%s/c%d", o, ordNames[st][:3], s.owner[o])
		}
	}
	return b.String()
}
