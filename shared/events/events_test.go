package events

import (
	"errors"
	"testing"
	"time"
)

func TestVerifySignature(t *testing.T) {
	body := []byte(`{"id":1,"type":"voucher.created"}`)
	now := time.Unix(1_800_000_000, 0)
	good := Sign("s3cret", now, body)
	cases := []struct {
		name, secret, header string
		body                 []byte
		at                   time.Time
		want                 error
	}{
		{"signed now", "s3cret", good, body, now, nil},
		{"within tolerance", "s3cret", good, body, now.Add(4 * time.Minute), nil},
		{"rotated: second v1 matches", "s3cret", good[:len(good)-64] + "00,v1=" + good[len(good)-64:], body, now, nil},
		{"other secret", "other", good, body, now, ErrBadSignature},
		{"body changed", "s3cret", good, []byte(`{"id":2}`), now, ErrBadSignature},
		{"replayed later", "s3cret", good, body, now.Add(6 * time.Minute), ErrStaleSignature},
		{"from the future", "s3cret", good, body, now.Add(-6 * time.Minute), ErrStaleSignature},
		{"no v1", "s3cret", "t=1800000000", body, now, ErrMalformedSignature},
		{"no t", "s3cret", "v1=00", body, now, ErrMalformedSignature},
		{"not hex", "s3cret", "t=1800000000,v1=zz", body, now, ErrMalformedSignature},
		{"garbage", "s3cret", "hello", body, now, ErrMalformedSignature},
	}
	for _, c := range cases {
		err := verifyAt(c.secret, c.header, c.body, 5*time.Minute, c.at)
		if !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
			t.Errorf("%s: verify(%q) = %v, want %v", c.name, c.header, err, c.want)
		}
	}
	if err := verifyAt("s3cret", good, body, 0, now.Add(24*time.Hour)); err != nil {
		t.Errorf("tolerance 0: verify = %v, want nil", err)
	}
}
