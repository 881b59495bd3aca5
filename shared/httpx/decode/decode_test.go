package decode_test

import (
	"testing"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/voucher"
)

// TestDecodeJSONStrict pins what "malformed JSON and unknown fields are refused"
// means for bodies that encoding/json alone would take: a key sent twice (it
// keeps the last), a key in another case (it matches case-insensitively), and
// non-JSON whitespace around the object. A gateway, a WAF or a log reading the
// same bytes with another parser would see another request than we do.
func TestDecodeJSONStrict(t *testing.T) {
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"plain", `{"customerId":1,"orderId":"a","orderAmount":1}`, true},
		{"JSON whitespace", " \t\r\n{ \"customerId\" : 1 ,\"orderAmount\":1,\"orderId\":\"a\"}\r\n", true},
		{"duplicate key, same value", `{"customerId":1,"customerId":1,"orderId":"a","orderAmount":1}`, false},
		{"duplicate key, last wins", `{"customerId":-1,"customerId":1,"orderId":"a","orderAmount":1}`, false},
		{"duplicate key, first invalid", `{"customerId":1,"orderId":"{x}","orderId":"a","orderAmount":1}`, false},
		{"key in upper case", `{"CUSTOMERID":1,"orderId":"a","orderAmount":1}`, false},
		{"key in title case", `{"customerId":1,"OrderId":"a","orderAmount":1}`, false},
		{"key folding to the same field", `{"customerId":1,"customerid":2,"orderId":"a","orderAmount":1}`, false},
		{"long s folding to s", "{\"cu\u017ftomerId\":1,\"orderId\":\"a\",\"orderAmount\":1}", false},
		{"no-break space before", "\u00a0{\"customerId\":1,\"orderId\":\"a\",\"orderAmount\":1}", false},
		{"next line after", "{\"customerId\":1,\"orderId\":\"a\",\"orderAmount\":1}\u0085", false},
		{"BOM before", "\ufeff{\"customerId\":1,\"orderId\":\"a\",\"orderAmount\":1}", false},
		{"vertical tab before", "\v{\"customerId\":1,\"orderId\":\"a\",\"orderAmount\":1}", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req api.ReserveRequest
			err := decode.JSON([]byte(tt.body), &req)
			if tt.ok && err != nil {
				t.Errorf("JSON(%q) = %v, want nil", tt.body, err)
			}
			if !tt.ok {
				if err == nil {
					t.Errorf("JSON(%q) = nil, want INVALID_REQUEST", tt.body)
				} else if voucher.ErrorCode(err) != voucher.CodeInvalidRequest {
					t.Errorf("JSON(%q) = %v, want INVALID_REQUEST", tt.body, err)
				}
			}
		})
	}
}
