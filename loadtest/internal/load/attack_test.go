package load

import (
	"encoding/json"
	"testing"
)

func TestJSONString(t *testing.T) {
	tests := []struct {
		body, key, want string
	}{
		{`{"error":"OUT_OF_STOCK","message":"the voucher has no uses left"}`, "error", "OUT_OF_STOCK"},
		{`{"orderId":"c-1a","discountAmount":100000}`, "orderId", "c-1a"},
		{`{"error": "ALREADY_USED", "message": "x"}`, "error", "ALREADY_USED"}, // spaced: parsed properly
		{`{"message":"has \"error\":\"NOPE\" inside","error":"REAL"}`, "error", "REAL"},
		{`{"orderId":"a","discountAmount":1}`, "error", ""},
		{`not json`, "error", ""},
		{``, "error", ""},
	}
	for _, tt := range tests {
		if got := jsonString([]byte(tt.body), tt.key); got != tt.want {
			t.Errorf("jsonString(%s, %q) = %q, want %q", tt.body, tt.key, got, tt.want)
		}
	}
}

func TestReserveBody(t *testing.T) {
	b := reserveBody(Order{ID: "CODE-1z", Customer: 42}, 750000)
	var got struct {
		CustomerID  int64  `json:"customerId"`
		OrderID     string `json:"orderId"`
		OrderAmount int64  `json:"orderAmount"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.CustomerID != 42 || got.OrderID != "CODE-1z" || got.OrderAmount != 750000 {
		t.Errorf("reserveBody = %s (%+v, %v), want customer 42, order CODE-1z, amount 750000", b, got, err)
	}
}
