package admissions

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashgate/flashgate/ledger/internal/store"
	"github.com/flashgate/flashgate/shared/voucher"
)

func TestDecode(t *testing.T) {
	good := Admission{Code: "FLASH1", CustomerID: 7, OrderID: "o-1", OrderAmount: 5000, AdmittedAt: time.Unix(1, 0).UTC()}
	rec, err := good.record("t")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decode(rec); err != nil || got != good {
		t.Errorf("decode(%s) = %v, %v, want %v", rec.Value, got, err, good)
	}
	for _, bad := range []*kgo.Record{
		{Key: []byte("FLASH1"), Value: []byte(`not json`)},
		{Key: []byte("OTHER"), Value: rec.Value}, // the key is not the record's code
		{Key: []byte("FLASH1"), Value: []byte(`{"code":"FLASH1","customerId":0,"orderId":"o-1"}`)},
		{Key: []byte("FLASH1"), Value: []byte(`{"code":"FLASH1","customerId":1,"orderId":"bad id"}`)},
		{Key: []byte("a{b}"), Value: []byte(`{"code":"a{b}","customerId":1,"orderId":"o-1"}`)},
	} {
		if got, err := decode(bad); err == nil {
			t.Errorf("decode(%q, %s) = %v, want an error", bad.Key, bad.Value, got)
		}
	}
}

// TestPromised: a record carries its 201's promise through the log; a record
// produced before promises existed decodes without one (ok false), and is
// then decided at consume time.
func TestPromised(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123).UTC()
	want := store.Logged{Claim: voucher.Claim{CustomerID: 7, OrderID: "o-1", OrderAmount: 5000}, DiscountAmount: 500,
		AdmittedAt: at, ExpiresAt: at.Add(15 * time.Minute)}
	rec, err := admissionOf("FLASH1", want).record("t")
	if err != nil {
		t.Fatal(err)
	}
	a, err := decode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := a.Promised(); !ok || got != want {
		t.Errorf("Promised() of %s = %v, %v, want %v, true", rec.Value, got, ok, want)
	}
	old := &kgo.Record{Key: []byte("FLASH1"), Value: []byte(
		`{"code":"FLASH1","customerId":7,"orderId":"o-1","orderAmount":5000,"admittedAt":"2026-01-01T00:00:00Z"}`)}
	a, err = decode(old)
	if err != nil {
		t.Fatalf("decode(%s): %v", old.Value, err)
	}
	if got, ok := a.Promised(); ok {
		t.Errorf("Promised() of %s = %v, true, want false", old.Value, got)
	}
}
