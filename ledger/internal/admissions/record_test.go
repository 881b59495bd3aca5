package admissions

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
