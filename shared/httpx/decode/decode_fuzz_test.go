package decode_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The README's rules, spelled out again here rather than borrowed from the
// package under test.
var (
	orderIDRule = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)
	codeRule    = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
)

// reserveSeeds are bodies of POST /vouchers/{code}/reservations: valid ones and
// the hostile shapes the services must refuse.
var reserveSeeds = []string{
	`{"customerId": 42, "orderId": "order-1001", "orderAmount": 750000}`,
	`{"customerId":1,"orderId":"a","orderAmount":0}`,
	`{"customerId":9223372036854775807,"orderId":"A.b:c_d-9","orderAmount":1125899906842624}`,
	`{"customerId":1,"orderId":"a","orderAmount":1125899906842625}`,
	`{"customerId":0,"orderId":"a","orderAmount":1}`,
	`{"customerId":-1,"orderId":"a","orderAmount":1}`,
	`{"customerId":-0,"orderId":"a","orderAmount":-0}`,
	`{"customerId":1e2,"orderId":"a","orderAmount":1}`,
	`{"customerId":1.5,"orderId":"a","orderAmount":1}`,
	`{"customerId":1e400,"orderId":"a","orderAmount":1}`,
	`{"customerId":9223372036854775808,"orderId":"a","orderAmount":1}`,
	`{"customerId":"1","orderId":"a","orderAmount":1}`,
	`{"customerId":1,"orderId":1,"orderAmount":1}`,
	`{"customerId":1,"orderId":"","orderAmount":1}`,
	`{"customerId":1,"orderId":"{x}","orderAmount":1}`,
	`{"customerId":1,"orderId":"a b","orderAmount":1}`,
	`{"customerId":1,"orderId":"a\u0000b","orderAmount":1}`,
	`{"customerId":1,"orderId":"\u00e9t\u00e9","orderAmount":1}`,
	`{"customerId":1,"orderId":"a\n","orderAmount":1}`,
	`{"customerId":1,"orderId":"0123456789012345678901234567890123456789012345678901234567890123","orderAmount":1}`,
	`{"customerId":1,"orderId":"01234567890123456789012345678901234567890123456789012345678901234","orderAmount":1}`,
	`{"customerId":1,"orderId":"a","orderAmount":1,"extra":true}`,
	`{"customerId":1,"customerId":2,"orderId":"a","orderAmount":1}`,
	`{"customerId":null,"orderId":"a","orderAmount":1}`,
	`{"orderId":"a","orderAmount":1}`,
	`{"customerId":1,"orderId":"a"}`,
	`{"customerId":1,"orderId":"a","orderAmount":NaN}`,
	`{"customerId":1,"orderId":"a","orderAmount":Infinity}`,
	`{"customerId":1,"orderId":"a","orderAmount":1}{}`,
	`{"customerId":1,"orderId":"a","orderAmount":1} x`,
	`{"customerId":1,"orderId":"a","orderAmount":1`,
	"\xef\xbb\xbf{\"customerId\":1,\"orderId\":\"a\",\"orderAmount\":1}",
	"{\"customerId\":1,\"orderId\":\"\xff\xfe\",\"orderAmount\":1}",
	" \t\r\n{\"customerId\":1,\"orderId\":\"a\",\"orderAmount\":1}\n",
	`[{"customerId":1,"orderId":"a","orderAmount":1}]`,
	`"{\"customerId\":1}"`,
	`null`,
	`{}`,
	``,
	"\x00",
	`{"customerId":{"customerId":{"customerId":1}},"orderId":"a","orderAmount":1}`,
	`{"customerId":[1],"orderId":"a","orderAmount":1}`,
	`{"customer\u0049d":1,"orderId":"\u0041\/b","orderAmount":1}`,
	`{"customerId":1,"orderId":"\ud83d\ude00","orderAmount":1}`,
	`{"customerId":1,"orderId":"\udc00\ud800x","orderAmount":1}`,
	`{"customerId":-9223372036854775808,"orderId":"a","orderAmount":01}`,
	`{"customerId":1,"orderId":"a","orderAmount":1.0e+2}`,
	`{"customerId":1,"orderId":"a","orderAmount":null,"orderAmount":1}`,
	`{"customerId":1 , "orderId" : "a" , "orderAmount" : 1 , }`,
	`{"customerId":1,"orderId":"a","orderAmount":1,"orderId\u0000":1}`,
	`{"customerId":1,"orderId":"a","orderAmount":18446744073709551616}`,
	`{"customerId":tru,"orderId":"a","orderAmount":1}`,
}

// FuzzDecodeReserveRequest feeds arbitrary bodies through the reserve route's
// decoding and validation: it never panics, every refusal is a 400
// INVALID_REQUEST with a message, and every accepted claim satisfies the rules
// and survives the proxy's re-encoding to the ledger unchanged.
func FuzzDecodeReserveRequest(f *testing.F) {
	for _, s := range reserveSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sameAsGeneric(t, body)
		var req api.ReserveRequest
		if err := decode.JSON(body, &req); err != nil {
			checkInvalid(t, "JSON", body, err)
			return
		}
		cl, err := req.Validate()
		if err != nil {
			checkInvalid(t, "Validate", body, err)
			return
		}
		checkClaim(t, body, cl)
		if *req.CustomerID != cl.CustomerID || *req.OrderID != cl.OrderID || *req.OrderAmount != cl.OrderAmount {
			t.Fatalf("Validate(%q) = %+v, want the request's own values", body, cl)
		}

		// The proxy sends the claim on to the ledger as JSON: the ledger must read
		// the same claim back.
		again, err := json.Marshal(cl)
		if err != nil {
			t.Fatalf("Marshal(%+v) = %v", cl, err)
		}
		var req2 api.ReserveRequest
		if err := decode.JSON(again, &req2); err != nil {
			t.Fatalf("JSON(%s) = %v, want the re-encoded claim accepted", again, err)
		}
		cl2, err := req2.Validate()
		if err != nil || cl2 != cl {
			t.Fatalf("Validate(%s) = %+v, %v, want %+v", again, cl2, err, cl)
		}
	})
}

// sameAsGeneric asserts that the reserve body's one-pass tokenizer takes
// exactly the bodies encoding/json with the duplicate-key check takes (the
// path every other body takes), with the same values, and that both refuse
// the others: one parser in front of another must not read a body otherwise.
func sameAsGeneric(t *testing.T, body []byte) {
	t.Helper()
	var fast, slow api.ReserveRequest
	errFast := decode.JSON(body, &fast)
	errSlow := decode.DecodeGeneric(body, &slow)
	if (errFast == nil) != (errSlow == nil) {
		t.Fatalf("JSON(%q) = %v, encoding/json = %v", body, errFast, errSlow)
	}
	if errFast != nil {
		return
	}
	same := func(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	sameStr := (fast.OrderID == nil) == (slow.OrderID == nil) && (fast.OrderID == nil || *fast.OrderID == *slow.OrderID)
	if !same(fast.CustomerID, slow.CustomerID) || !same(fast.OrderAmount, slow.OrderAmount) || !sameStr {
		t.Fatalf("JSON(%q) read %s, encoding/json read %s", body, show(fast), show(slow))
	}
}

func show(r api.ReserveRequest) string {
	out, _ := json.Marshal(r)
	return string(out)
}

// checkClaim asserts the README's rules on an accepted claim.
func checkClaim(t *testing.T, body []byte, cl voucher.Claim) {
	t.Helper()
	if cl.CustomerID <= 0 {
		t.Fatalf("Validate(%q) accepted customerId %d, want > 0", body, cl.CustomerID)
	}
	if !orderIDRule.MatchString(cl.OrderID) {
		t.Fatalf("Validate(%q) accepted orderId %q", body, cl.OrderID)
	}
	if cl.OrderAmount < 0 || cl.OrderAmount > voucher.MaxAmount {
		t.Fatalf("Validate(%q) accepted orderAmount %d, want 0..%d", body, cl.OrderAmount, voucher.MaxAmount)
	}
}

// checkInvalid asserts that err is what a client gets for bad input: a
// *voucher.Error INVALID_REQUEST (400) with a readable message.
func checkInvalid(t *testing.T, step string, body []byte, err error) {
	t.Helper()
	var e *voucher.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s(%q) = %T %v, want *voucher.Error", step, body, err, err)
	}
	if e.Code != voucher.CodeInvalidRequest || e.Message == "" || e.Reason != "" {
		t.Fatalf("%s(%q) = %+v, want INVALID_REQUEST with a message", step, body, e)
	}
	if !utf8.ValidString(e.Message) {
		t.Fatalf("%s(%q) message %q is not UTF-8", step, body, e.Message)
	}
	if s := httpx.Status(e.Code); s != http.StatusBadRequest {
		t.Fatalf("Status(%s) = %d, want 400", e.Code, s)
	}
}

// voucherSeeds are bodies of POST /admin/vouchers.
var voucherSeeds = []string{
	`{"code":"FLASH100","discountAmount":100000,"minOrderAmount":500000,"totalLimit":1000,"perUserLimit":1,"flashSale":true,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"a","discountAmount":1,"totalLimit":0,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2026-01-01T00:00:00.000000001Z"}`,
	`{"code":"a-b_C9","discountAmount":1125899906842624,"minOrderAmount":1125899906842624,"totalLimit":100000000,"perUserLimit":1000,"startsAt":"2026-01-01T00:00:00+07:00","endsAt":"2026-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2026-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":0,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":-1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"perUserLimit":0,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"perUserLimit":1001,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"startsAt":"2026-01-01","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"startsAt":1767225600,"endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x{y}","discountAmount":1,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x:y","discountAmount":1,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"012345678901234567890123456789012","discountAmount":1,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"flashSale":"yes","startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"startsAt":"0001-01-01T00:00:00Z","endsAt":"9999-12-31T23:59:59Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"startsAt":null,"endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":2147483648,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z"}`,
	`{"code":"x","discountAmount":1,"totalLimit":1,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2027-01-01T00:00:00Z","usedCount":5}`,
	`{}`,
}

// FuzzDecodeNewVoucher is FuzzDecodeReserveRequest for POST /admin/vouchers: a
// voucher that passes Validate satisfies every rule, and the ledger can answer
// with it (JSON) and read that answer back as the same voucher.
func FuzzDecodeNewVoucher(f *testing.F) {
	for _, s := range voucherSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req voucher.NewVoucher
		if err := decode.JSON(body, &req); err != nil {
			checkInvalid(t, "JSON", body, err)
			return
		}
		v, err := req.Validate()
		if err != nil {
			checkInvalid(t, "Validate", body, err)
			return
		}
		checkVoucher(t, body, req, v)

		// The ledger answers 201 with v, and GET /admin/vouchers/{code} with the
		// same fields: they must encode, and decode to the same voucher again.
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("Validate(%q) accepted a voucher the ledger cannot answer with: Marshal = %v", body, err)
		}
		var back voucher.Voucher
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("Unmarshal(%s) = %v", out, err)
		}
		same := back.StartsAt.Equal(v.StartsAt) && back.EndsAt.Equal(v.EndsAt)
		back.StartsAt, back.EndsAt = v.StartsAt, v.EndsAt
		if !same || back != v {
			t.Fatalf("voucher %+v came back from JSON as %+v", v, back)
		}
	})
}

// checkVoucher asserts the rules on a voucher that passed Validate.
func checkVoucher(t *testing.T, body []byte, req voucher.NewVoucher, v voucher.Voucher) {
	t.Helper()
	switch {
	case !codeRule.MatchString(v.Code):
		t.Fatalf("Validate(%q) accepted code %q", body, v.Code)
	case v.DiscountAmount <= 0 || v.DiscountAmount > voucher.MaxAmount:
		t.Fatalf("Validate(%q) accepted discountAmount %d", body, v.DiscountAmount)
	case v.MinOrderAmount < 0 || v.MinOrderAmount > voucher.MaxAmount:
		t.Fatalf("Validate(%q) accepted minOrderAmount %d", body, v.MinOrderAmount)
	case v.TotalLimit < 0 || v.TotalLimit > voucher.MaxTotalLimit:
		t.Fatalf("Validate(%q) accepted totalLimit %d", body, v.TotalLimit)
	case v.PerUserLimit < 1 || v.PerUserLimit > voucher.MaxPerUserLimit:
		t.Fatalf("Validate(%q) accepted perUserLimit %d", body, v.PerUserLimit)
	case !v.StartsAt.Before(v.EndsAt):
		t.Fatalf("Validate(%q) accepted startsAt %s not before endsAt %s", body, v.StartsAt, v.EndsAt)
	case v.StartsAt.Location() != time.UTC || v.EndsAt.Location() != time.UTC:
		t.Fatalf("Validate(%q) returned times not in UTC: %s, %s", body, v.StartsAt, v.EndsAt)
	case v.UsedCount != 0 || v.ReservedCount != 0 || v.ConfirmedCount != 0 || v.Remaining != v.TotalLimit:
		t.Fatalf("Validate(%q) returned counters %+v, want a fresh voucher", body, v)
	case req.PerUserLimit == nil && v.PerUserLimit != 1,
		req.MinOrderAmount == nil && v.MinOrderAmount != 0,
		req.FlashSale == nil && v.FlashSale:
		t.Fatalf("Validate(%q) = %+v, want defaults perUserLimit 1, minOrderAmount 0, flashSale false", body, v)
	}
}
