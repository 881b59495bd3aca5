package sale_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/ledger/internal/ledgertest"
	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// FuzzStateMachine runs short sequences of reserve, confirm, release, refund
// and get over HTTP against a fresh standard voucher on the real Postgres, and
// checks every answer against a small model of the voucher, and the
// database's counters against the model after every step.
//
// The input reads as: stock (1..4), per-user limit (1..3), then up to
// smMaxOps operations of two bytes each: the kind, and the customer (1..3)
// and order (0..3 of this voucher, 4 = an order of another voucher, 5 = an
// orderId made only of dots).
func FuzzStateMachine(f *testing.F) {
	for _, p := range smSeeds {
		f.Add(p)
	}
	l := ledgertest.New(f, ledgertest.Options{NoRedis: true})

	// Another voucher's order: every operation on it through this voucher must
	// be refused and must leave it as it is.
	foreign := smCode("F")
	l.CreateVoucher(f, ledgertest.Spec(foreign, 1, 1, false))
	foreignOrder := foreign + "-o"
	r := l.Call(f, http.MethodPost, "/vouchers/"+foreign+"/reservations", ledgertest.ClaimBody(1, foreignOrder, 5_000))
	require.Equal(f, http.StatusCreated, r.Status, r.Raw)

	f.Fuzz(func(t *testing.T, input []byte) {
		p := smDecode(input)
		code := smCode("")
		s := ledgertest.Spec(code, p.stock, p.limit, false)
		s.DiscountAmount = smDiscount // below every order amount that reserves
		l.CreateVoucher(t, s)
		m := &smModel{stock: p.stock, limit: p.limit, orders: map[string]*smOrder{}, foreign: foreignOrder}
		for i, o := range p.ops {
			id := foreignOrder
			switch {
			case o.order < 4:
				id = code + "-o" + strconv.Itoa(o.order)
			case o.order == 5:
				id = smDots
			}
			got := o.send(t, l, code, id)
			want := m.apply(o, id)
			step := fmt.Sprintf("stock %d, limit %d, step %d: %s", p.stock, p.limit, i, o.describe(id))
			smCheckAnswer(t, step, o.kind, id, got, want)
			smCheckDB(t, step, l, code, m)
			if t.Failed() {
				t.Logf("program: %s", p)
				return
			}
		}
		smCheckCounters(t, l, code, m)
		smCheckForeign(t, l, foreign, foreignOrder)
	})
}

// smSeeds walk the transitions the README names.
var smSeeds = [][]byte{
	// Confirm, then a release is refused; retries are idempotent.
	smProgram(2, 1, smOp(smReserve, 1, 0), smOp(smReserve, 1, 0), smOp(smConfirm, 0, 0), smOp(smConfirm, 0, 0),
		smOp(smRelease, 0, 0), smOp(smGet, 0, 0)),
	// Stock 1: out of stock until a release; then a late confirm finds no use.
	smProgram(1, 1, smOp(smReserve, 1, 0), smOp(smReserve, 2, 1), smOp(smRelease, 0, 0), smOp(smReserve, 2, 1),
		smOp(smConfirm, 0, 0), smOp(smGet, 0, 0), smOp(smGet, 0, 1)),
	// Per-user limit 1: a second order is ALREADY_USED until the first is
	// released; a released orderId is never reused; another customer's orderId
	// is a conflict.
	smProgram(4, 1, smOp(smReserve, 1, 0), smOp(smReserve, 1, 1), smOp(smRelease, 0, 0), smOp(smReserve, 1, 1),
		smOp(smReserve, 1, 0), smOp(smReserve, 2, 1), smOp(smRelease, 0, 0)),
	// A late confirm takes a use again when one is left.
	smProgram(2, 2, smOp(smReserve, 1, 0), smOp(smRelease, 0, 0), smOp(smRelease, 0, 0), smOp(smConfirm, 0, 0),
		smOp(smRelease, 0, 0), smOp(smGet, 0, 0)),
	// Another voucher's order: conflict and not found, and it stays untouched.
	smProgram(3, 3, smOp(smReserve, 1, 4), smOp(smConfirm, 0, 4), smOp(smRelease, 0, 4), smOp(smGet, 0, 4),
		smOp(smReserve, 2, 4)),
	// Below the minimum order amount: 422 for a new order, but a retry of a
	// reserved one is answered as it was.
	smProgram(2, 2, smOp(smReserveSmall, 1, 0), smOp(smReserve, 1, 0), smOp(smReserveSmall, 1, 0),
		smOp(smReserveSmall, 2, 1), smOp(smGet, 0, 1)),
	// Unknown orders.
	smProgram(1, 1, smOp(smConfirm, 0, 3), smOp(smRelease, 0, 3), smOp(smGet, 0, 3), smOp(smRefund, 0, 3)),
	// A refund gives the use back, is idempotent, and is final; only a
	// confirmed reservation is refunded.
	smProgram(1, 1, smOp(smReserve, 1, 0), smOp(smRefund, 0, 0), smOp(smConfirm, 0, 0), smOp(smRefund, 0, 0),
		smOp(smRefund, 0, 0), smOp(smReserve, 2, 1), smOp(smConfirm, 0, 0), smOp(smRelease, 0, 0), smOp(smReserve, 1, 0),
		smOp(smGet, 0, 0), smOp(smRefund, 0, 1)),
	// The amount is part of a retry: another amount is a conflict.
	smProgram(2, 2, smOp(smReserve, 1, 0), smOp(smReserveOther, 1, 0), smOp(smReserveOther, 1, 1),
		smOp(smReserve, 1, 1), smOp(smReserveOther, 1, 1)),
	// orderIds made only of dots are refused, in bodies and paths.
	smProgram(1, 1, smOp(smReserve, 1, 5), smOp(smConfirm, 0, 5), smOp(smRelease, 0, 5), smOp(smGet, 0, 5),
		smOp(smRefund, 0, 5)),
	// Per-user limit 3 and stock 4 with three customers.
	smProgram(4, 3, smOp(smReserve, 1, 0), smOp(smReserve, 1, 1), smOp(smReserve, 1, 2), smOp(smReserve, 1, 3),
		smOp(smReserve, 2, 3), smOp(smConfirm, 0, 1), smOp(smRelease, 0, 2), smOp(smReserve, 3, 3), smOp(smConfirm, 0, 2)),
}

// smMaxOps bounds one execution: about 3 ms per step.
const smMaxOps = 12

const (
	smReserve      = iota // POST .../reservations, orderAmount 5000
	smReserveSmall        // the same with orderAmount 999, below the minimum of 1000
	smConfirm             // POST .../reservations/{orderId}/confirm
	smRelease             // DELETE .../reservations/{orderId}
	smGet                 // GET .../reservations/{orderId}
	smReserveOther        // POST .../reservations, orderAmount 7000
	smRefund              // POST .../reservations/{orderId}/refund
	smKinds
)

var smOpNames = [...]string{"reserve", "reserve-small", "confirm", "release", "get", "reserve-other", "refund"}

// smDiscount is the model voucher's discount, below every amount that reserves.
const smDiscount = 2_000

// smDots is order 5: an orderId made only of dots.
const smDots = ".."

// amount is the order amount a reserve kind sends.
func (o smOpCode) amount() int64 {
	switch o.kind {
	case smReserveSmall:
		return 999
	case smReserveOther:
		return 7_000
	}
	return 5_000
}

// reserves reports whether the operation is a reserve.
func (o smOpCode) reserves() bool {
	return o.kind == smReserve || o.kind == smReserveSmall || o.kind == smReserveOther
}

type smOpCode struct {
	kind     int
	customer int64 // 1..3
	order    int   // 0..3, or 4: the other voucher's order, or 5: smDots
}

func (o smOpCode) describe(id string) string {
	if o.reserves() {
		return fmt.Sprintf("%s(customer %d, %s)", smOpNames[o.kind], o.customer, id)
	}
	return fmt.Sprintf("%s(%s)", smOpNames[o.kind], id)
}

type smProgramSpec struct {
	stock, limit int
	ops          []smOpCode
}

func (p smProgramSpec) String() string {
	s := fmt.Sprintf("stock %d, limit %d:", p.stock, p.limit)
	for _, o := range p.ops {
		s += " " + o.describe("o"+strconv.Itoa(o.order))
	}
	return s
}

func smDecode(b []byte) smProgramSpec {
	at := func(i int) byte {
		if i < len(b) {
			return b[i]
		}
		return 0
	}
	p := smProgramSpec{stock: 1 + int(at(0)%4), limit: 1 + int(at(1)%3)}
	for i := 2; i+1 < len(b) && len(p.ops) < smMaxOps; i += 2 {
		arg := int(b[i+1])
		p.ops = append(p.ops, smOpCode{kind: int(b[i]) % smKinds, customer: int64(1 + arg%3), order: (arg / 3) % 6})
	}
	return p
}

// smProgram and smOp write a fuzz input that smDecode reads back.
func smProgram(stock, limit int, ops ...[2]byte) []byte {
	b := []byte{byte(stock - 1), byte(limit - 1)}
	for _, o := range ops {
		b = append(b, o[0], o[1])
	}
	return b
}

func smOp(kind int, customer int64, order int) [2]byte {
	if customer == 0 {
		customer = 1
	}
	return [2]byte{byte(kind), byte(order*3 + int(customer-1))}
}

var smSeq atomic.Int64

// smCode returns a voucher code unique across fuzz worker processes.
func smCode(kind string) string {
	return fmt.Sprintf("fsm%s-%s-%s-%s", kind, strconv.FormatInt(int64(os.Getpid()), 36),
		strconv.FormatInt(time.Now().UnixNano(), 36), strconv.FormatInt(smSeq.Add(1), 36))
}

func (o smOpCode) send(t *testing.T, l *ledgertest.Ledger, code, id string) ledgertest.Reply {
	base := "/vouchers/" + code + "/reservations"
	switch o.kind {
	case smReserve, smReserveSmall, smReserveOther:
		return l.Call(t, http.MethodPost, base, ledgertest.ClaimBody(o.customer, id, o.amount()))
	case smConfirm:
		return l.Call(t, http.MethodPost, base+"/"+id+"/confirm", nil)
	case smRelease:
		return l.Call(t, http.MethodDelete, base+"/"+id, nil)
	case smRefund:
		return l.Call(t, http.MethodPost, base+"/"+id+"/refund", nil)
	}
	return l.Call(t, http.MethodGet, base+"/"+id, nil)
}

// smModel is what a voucher's state must be: used = active (RESERVED or
// CONFIRMED) reservations, at most stock of them and at most limit per customer.
type smModel struct {
	stock, limit int
	orders       map[string]*smOrder
	foreign      string
}

type smOrder struct {
	customer int64
	amount   int64
	status   voucher.Status
}

func (m *smModel) used() int {
	n := 0
	for _, o := range m.orders {
		if o.status.Active() {
			n++
		}
	}
	return n
}

func (m *smModel) active(customer int64) int {
	n := 0
	for _, o := range m.orders {
		if o.customer == customer && o.status.Active() {
			n++
		}
	}
	return n
}

func (m *smModel) count(s voucher.Status) int {
	n := 0
	for _, o := range m.orders {
		if o.status == s {
			n++
		}
	}
	return n
}

// smExpected is one answer: the status, the error code (for errors) and the
// reservation as it must stand afterwards.
type smExpected struct {
	status   int
	code     string
	reason   string
	order    *smOrder
	replayed bool // a 201 answered from the stored reservation
}

func smFail(status int, code string) smExpected { return smExpected{status: status, code: code} }

// apply runs one operation on the model, as README's API describes it.
func (m *smModel) apply(o smOpCode, id string) smExpected {
	r, exists := m.orders[id]
	switch {
	case id == smDots:
		return smFail(http.StatusBadRequest, voucher.CodeInvalidRequest)
	case id == m.foreign && o.reserves():
		return smFail(http.StatusConflict, voucher.CodeOrderConflict) // held by another voucher
	case id == m.foreign:
		return smFail(http.StatusNotFound, voucher.CodeReservationNotFound)
	case !exists && !o.reserves():
		return smFail(http.StatusNotFound, voucher.CodeReservationNotFound)
	}
	switch o.kind {
	case smReserve, smReserveSmall, smReserveOther:
		return m.reserve(o, id, r)
	case smConfirm:
		switch r.status {
		case voucher.Refunded:
			return smFail(http.StatusConflict, voucher.CodeReservationRefunded)
		case voucher.Released: // every release here is a DELETE: final
			return smFail(http.StatusConflict, voucher.CodeReservationReleased)
		}
		r.status = voucher.Confirmed
		return smExpected{status: http.StatusOK, order: r}
	case smRelease:
		switch r.status {
		case voucher.Confirmed:
			return smFail(http.StatusConflict, voucher.CodeAlreadyConfirmed)
		case voucher.Reserved:
			r.status = voucher.Released
		}
		return smExpected{status: http.StatusNoContent}
	case smRefund:
		switch r.status {
		case voucher.Reserved, voucher.Released:
			return smFail(http.StatusConflict, voucher.CodeNotConfirmed)
		}
		r.status = voucher.Refunded
		return smExpected{status: http.StatusOK, order: r}
	}
	return smExpected{status: http.StatusOK, order: r}
}

// reserve is apply for a reserve of id (r: its order, nil if new): a retry is
// decided before eligibility.
func (m *smModel) reserve(o smOpCode, id string, r *smOrder) smExpected {
	switch {
	case r != nil && (r.customer != o.customer || r.amount != o.amount()):
		return smFail(http.StatusConflict, voucher.CodeOrderConflict)
	case r != nil && r.status == voucher.Released:
		return smFail(http.StatusConflict, voucher.CodeReservationReleased)
	case r != nil && r.status == voucher.Refunded:
		return smFail(http.StatusConflict, voucher.CodeReservationRefunded)
	case r != nil:
		return smExpected{status: http.StatusCreated, order: r, replayed: true}
	case o.kind == smReserveSmall:
		return smExpected{status: http.StatusUnprocessableEntity, code: voucher.CodeNotEligible, reason: voucher.ReasonOrderTooSmall}
	case m.active(o.customer) >= m.limit:
		return smFail(http.StatusConflict, voucher.CodeAlreadyUsed)
	case m.used() >= m.stock:
		return smFail(http.StatusConflict, voucher.CodeOutOfStock)
	}
	r = &smOrder{customer: o.customer, amount: o.amount(), status: voucher.Reserved}
	m.orders[id] = r
	return smExpected{status: http.StatusCreated, order: r}
}

// smCheckAnswer compares an HTTP answer with the model's, body included.
func smCheckAnswer(t *testing.T, step string, kind int, id string, got ledgertest.Reply, want smExpected) {
	t.Helper()
	if got.Status != want.status {
		t.Errorf("%s = %d %s, want %d %s", step, got.Status, got.Raw, want.status, want.code)
		return
	}
	if want.code != "" {
		msg, _ := got.Body["message"].(string)
		reason, _ := got.Body["reason"].(string)
		if got.Code() != want.code || msg == "" || reason != want.reason {
			t.Errorf("%s = %d %s, want error %s (reason %q) with a message", step, got.Status, got.Raw, want.code, want.reason)
		}
		return
	}
	switch got.Status {
	case http.StatusNoContent:
		if got.Raw != "" {
			t.Errorf("%s = 204 with body %q, want none", step, got.Raw)
		}
	case http.StatusCreated:
		smCheckJSON(t, step, got.Raw, fmt.Sprintf(`{"orderId":%q,"discountAmount":%d}`, id, smDiscount))
		if replayed := got.Header.Get(api.HeaderReplayed) == "true"; replayed != want.replayed {
			t.Errorf("%s: %s header %q, want replayed %v", step, api.HeaderReplayed, got.Header.Get(api.HeaderReplayed), want.replayed)
		}
	case http.StatusOK:
		switch kind {
		case smConfirm, smRefund:
			smCheckJSON(t, step, got.Raw, fmt.Sprintf(`{"orderId":%q,"status":%q,"discountAmount":%d}`, id, want.order.status, smDiscount))
			return
		}
		var r voucher.Reservation
		if err := json.Unmarshal([]byte(got.Raw), &r); err != nil {
			t.Errorf("%s = %s: %v", step, got.Raw, err)
			return
		}
		if r.OrderID != id || r.CustomerID != want.order.customer || r.Status != want.order.status ||
			r.DiscountAmount != smDiscount || !r.ExpiresAt.After(r.CreatedAt) || len(got.Body) != 6 {
			t.Errorf("%s = %s, want order %s of customer %d, %s", step, got.Raw, id, want.order.customer, want.order.status)
		}
	}
}

func smCheckJSON(t *testing.T, step, got, want string) {
	t.Helper()
	var g, w any
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil || !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", step, got, want)
	}
}

// smDBVoucher is a voucher's rows as the database holds them.
type smDBVoucher struct {
	Used   int
	Orders []struct {
		ID       string `json:"order_id"`
		Customer int64  `json:"customer_id"`
		Status   string `json:"status"`
	}
	Usage []struct {
		Customer int64 `json:"customer_id"`
		Used     int   `json:"used_count"`
		Limit    int   `json:"per_user_limit"`
	}
}

func smReadDB(t *testing.T, l *ledgertest.Ledger, code string) smDBVoucher {
	t.Helper()
	var d smDBVoucher
	var orders, usage []byte
	err := l.Pool.QueryRow(context.Background(), `
		SELECT v.used_count,
		       coalesce((SELECT json_agg(json_build_object('order_id', order_id, 'customer_id', customer_id, 'status', status))
		                 FROM voucher_redemption WHERE voucher_code = v.code), '[]'),
		       coalesce((SELECT json_agg(json_build_object('customer_id', customer_id, 'used_count', used_count, 'per_user_limit', per_user_limit))
		                 FROM voucher_customer_usage WHERE voucher_code = v.code), '[]')
		FROM voucher v WHERE v.code = $1`, code).Scan(&d.Used, &orders, &usage)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(orders, &d.Orders))
	require.NoError(t, json.Unmarshal(usage, &d.Usage))
	return d
}

// smCheckDB holds the database to the model and to its own invariants: used_count
// is the number of active rows, each customer's usage row the number of their
// active rows, neither above its limit.
func smCheckDB(t *testing.T, step string, l *ledgertest.Ledger, code string, m *smModel) {
	t.Helper()
	d := smReadDB(t, l, code)
	active := 0
	perCustomer := map[int64]int{}
	for _, o := range d.Orders {
		want, ok := m.orders[o.ID]
		if !ok || want.customer != o.Customer || string(want.status) != o.Status {
			t.Errorf("%s: row %+v, want %+v", step, o, want)
		}
		if voucher.Status(o.Status).Active() {
			active++
			perCustomer[o.Customer]++
		}
	}
	if len(d.Orders) != len(m.orders) {
		t.Errorf("%s: %d rows, want %d", step, len(d.Orders), len(m.orders))
	}
	if d.Used != active || d.Used != m.used() || d.Used > m.stock {
		t.Errorf("%s: used_count %d, active rows %d, model %d, stock %d", step, d.Used, active, m.used(), m.stock)
	}
	usage := map[int64]int{}
	for _, u := range d.Usage {
		usage[u.Customer] = u.Used
		if u.Limit != m.limit || u.Used > u.Limit || u.Used < 0 {
			t.Errorf("%s: usage row %+v, limit %d", step, u, m.limit)
		}
	}
	for c := int64(1); c <= 3; c++ {
		if usage[c] != perCustomer[c] || usage[c] != m.active(c) {
			t.Errorf("%s: customer %d usage %d, active rows %d, model %d", step, c, usage[c], perCustomer[c], m.active(c))
		}
	}
}

// smCheckCounters compares GET /admin/vouchers/{code} with the model.
func smCheckCounters(t *testing.T, l *ledgertest.Ledger, code string, m *smModel) {
	t.Helper()
	r := l.Call(t, http.MethodGet, "/admin/vouchers/"+code, nil)
	var v voucher.Voucher
	if r.Status != http.StatusOK || json.Unmarshal([]byte(r.Raw), &v) != nil {
		t.Errorf("GET /admin/vouchers/%s = %d %s", code, r.Status, r.Raw)
		return
	}
	reserved, confirmed := m.count(voucher.Reserved), m.count(voucher.Confirmed)
	if v.UsedCount != reserved+confirmed || v.ReservedCount != reserved || v.ConfirmedCount != confirmed ||
		v.Remaining != m.stock-reserved-confirmed {
		t.Errorf("GET /admin/vouchers/%s = used %d reserved %d confirmed %d remaining %d, want %d %d %d %d",
			code, v.UsedCount, v.ReservedCount, v.ConfirmedCount, v.Remaining,
			reserved+confirmed, reserved, confirmed, m.stock-reserved-confirmed)
	}
}

// smCheckForeign asserts the other voucher's order was left alone.
func smCheckForeign(t *testing.T, l *ledgertest.Ledger, code, orderID string) {
	t.Helper()
	d := smReadDB(t, l, code)
	if d.Used != 1 || len(d.Orders) != 1 || d.Orders[0].ID != orderID || d.Orders[0].Status != string(voucher.Reserved) {
		t.Errorf("other voucher %s changed: %+v", code, d)
	}
}
