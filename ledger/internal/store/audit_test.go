package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// TestAuditTermsJSON: what the audit trail and the voucher events keep of a
// voucher's terms, byte for byte: times in UTC, holdTtl only when set, and
// writePath only for a log voucher.
func TestAuditTermsJSON(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.FixedZone("X", 3600))
	v := voucher.Voucher{Code: "C1", State: voucher.StateLive, UsedCount: 3, Remaining: 7}
	v.DiscountAmount, v.MinOrderAmount, v.TotalLimit, v.PerUserLimit = 500, 1000, 10, 2
	v.StartsAt, v.EndsAt, v.FlashSale, v.WritePath = at, at.Add(time.Hour), true, voucher.WritePathSync
	logged := v
	logged.Paused, logged.RequireCheckoutToken = true, true
	logged.HoldTTL, logged.WritePath = voucher.Duration(3*time.Minute), voucher.WritePathLog
	for _, tc := range []struct {
		v    voucher.Voucher
		want string
	}{
		{v, `{"discountAmount":500,"minOrderAmount":1000,"totalLimit":10,"perUserLimit":2,` +
			`"startsAt":"2026-12-07T09:00:00Z","endsAt":"2026-12-07T10:00:00Z","flashSale":true,"paused":false,` +
			`"requireCheckoutToken":false}`},
		{logged, `{"discountAmount":500,"minOrderAmount":1000,"totalLimit":10,"perUserLimit":2,` +
			`"startsAt":"2026-12-07T09:00:00Z","endsAt":"2026-12-07T10:00:00Z","flashSale":true,"paused":true,` +
			`"requireCheckoutToken":true,"holdTtl":"3m0s","writePath":"log"}`},
	} {
		got, err := json.Marshal(TermsOf(tc.v))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("json.Marshal(TermsOf(%s)) = %s, want %s", tc.v.WritePath, got, tc.want)
		}
	}
}
