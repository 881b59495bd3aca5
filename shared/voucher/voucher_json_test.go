package voucher

import (
	"encoding/json"
	"testing"
	"time"
)

// TestVoucherJSON: a voucher view's JSON, byte for byte, fields in order.
func TestVoucherJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	v := Voucher{Code: "C1", State: StateLive, UsedCount: 3, ReservedCount: 2, ConfirmedCount: 1, Remaining: 7}
	v.DiscountAmount, v.MinOrderAmount, v.TotalLimit, v.PerUserLimit = 500, 1000, 10, 2
	v.StartsAt, v.EndsAt, v.FlashSale, v.WritePath = at, at.Add(time.Hour), true, WritePathSync
	want := `{"code":"C1","discountAmount":500,"minOrderAmount":1000,"totalLimit":10,"perUserLimit":2,` +
		`"startsAt":"2026-12-07T09:00:00Z","endsAt":"2026-12-07T10:00:00Z","flashSale":true,"paused":false,` +
		`"requireCheckoutToken":false,"writePath":"sync","state":"live","usedCount":3,"reservedCount":2,` +
		`"confirmedCount":1,"refundedCount":0,"remaining":7}`
	got, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("json.Marshal(voucher) = %s, want %s", got, want)
	}
	var back Voucher
	if err := json.Unmarshal(got, &back); err != nil || back != v {
		t.Errorf("json.Unmarshal(%s) = %+v, %v; want %+v", got, back, err, v)
	}
}
