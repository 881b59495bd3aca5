package checkout_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/checkout"
	"github.com/flashgate/flashgate/shared/voucher"
)

const (
	oldSecret = "old-secret-0123456789"
	newSecret = "new-secret-9876543210"
)

// TestVerify: a token verifies only for its voucher and customer, before its
// expiry, under a listed key id; a rotated-out key's tokens still verify while
// that key is listed; anything malformed is refused.
func TestVerify(t *testing.T) {
	keys, err := checkout.ParseKeys("k2:" + newSecret + ",k1:" + oldSecret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(3 * time.Minute)
	good := keys.Mint("FLASH", 42, exp)
	rotated := checkout.Mint(checkout.Key{ID: "k1", Secret: []byte(oldSecret)}, "FLASH", 42, exp)
	unknown := checkout.Mint(checkout.Key{ID: "k0", Secret: []byte(oldSecret)}, "FLASH", 42, exp)
	forged := checkout.Mint(checkout.Key{ID: "k2", Secret: []byte("not-the-secret-at-all")}, "FLASH", 42, exp)
	parts := strings.Split(good, ".")
	tests := []struct {
		name     string
		token    string
		code     string
		customer int64
		at       time.Time
		ok       bool
	}{
		{"valid", good, "FLASH", 42, now, true},
		{"valid a second before expiry", good, "FLASH", 42, exp.Add(-time.Second), true},
		{"rotated key still listed", rotated, "FLASH", 42, now, true},
		{"expired", good, "FLASH", 42, exp, false},
		{"expired long ago", good, "FLASH", 42, exp.Add(time.Hour), false},
		{"wrong voucher", good, "FLASH2", 42, now, false},
		{"wrong customer", good, "FLASH", 43, now, false},
		{"unknown key id", unknown, "FLASH", 42, now, false},
		{"wrong secret", forged, "FLASH", 42, now, false},
		{"expiry moved", strings.Join([]string{parts[0], parts[1], "1900000000", parts[3]}, "."), "FLASH", 42, now, false},
		{"expiry with a plus sign", strings.Join([]string{parts[0], parts[1], "+" + parts[2], parts[3]}, "."), "FLASH", 42, now, false},
		{"other version", "v2." + strings.Join(parts[1:], "."), "FLASH", 42, now, false},
		{"empty", "", "FLASH", 42, now, false},
		{"three fields", strings.Join(parts[:3], "."), "FLASH", 42, now, false},
		{"five fields", good + ".x", "FLASH", 42, now, false},
		{"mac not base64url", strings.Join([]string{parts[0], parts[1], parts[2], "!!!"}, "."), "FLASH", 42, now, false},
		{"mac truncated", strings.Join([]string{parts[0], parts[1], parts[2], parts[3][:20]}, "."), "FLASH", 42, now, false},
		{"mac padded", good + "=", "FLASH", 42, now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := keys.Verify(tt.token, tt.code, tt.customer, tt.at)
			if tt.ok && err != nil {
				t.Errorf("Verify(%q, %s, %d) = %v, want nil", tt.token, tt.code, tt.customer, err)
			}
			if !tt.ok && !errors.Is(err, checkout.ErrInvalid) {
				t.Errorf("Verify(%q, %s, %d) = %v, want ErrInvalid", tt.token, tt.code, tt.customer, err)
			}
		})
	}
}

// TestVerifyAfterRotation: once the old key is dropped from the list, its
// tokens are refused, and the new key's still verify.
func TestVerifyAfterRotation(t *testing.T) {
	exp := time.Unix(1_800_000_180, 0)
	old := checkout.Mint(checkout.Key{ID: "k1", Secret: []byte(oldSecret)}, "V", 7, exp)
	keys, err := checkout.ParseKeys("k2:" + newSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Verify(old, "V", 7, exp.Add(-time.Minute)); !errors.Is(err, checkout.ErrInvalid) {
		t.Errorf("Verify(token of a dropped key) = %v, want ErrInvalid", err)
	}
	if err := keys.Verify(keys.Mint("V", 7, exp), "V", 7, exp.Add(-time.Minute)); err != nil {
		t.Errorf("Verify(token of the current key) = %v, want nil", err)
	}
}

// TestParseKeys: the syntax keyId:secret[,keyId:secret...], whose secrets may
// hold colons; bad ids, short secrets, duplicates and missing colons are
// refused without the secret in the message.
func TestParseKeys(t *testing.T) {
	keys, err := checkout.ParseKeys(" a:" + oldSecret + ":x , b_2:" + newSecret)
	if err != nil || len(keys) != 2 || keys[0].ID != "a" || string(keys[0].Secret) != oldSecret+":x" || keys[1].ID != "b_2" {
		t.Fatalf("ParseKeys = %+v, %v", keys, err)
	}
	if keys, err := checkout.ParseKeys(""); keys != nil || err != nil {
		t.Errorf("ParseKeys(\"\") = %v, %v, want nil, nil", keys, err)
	}
	for _, bad := range []string{
		"nocolon" + oldSecret,
		"a:short",
		"a:" + oldSecret + ",a:" + newSecret,
		"bad id:" + oldSecret,
		":" + oldSecret,
		"a:" + oldSecret + ",",
		strings.Repeat("k", 33) + ":" + oldSecret,
	} {
		_, err := checkout.ParseKeys(bad)
		if err == nil {
			t.Errorf("ParseKeys(%q) = nil, want an error", bad)
			continue
		}
		if strings.Contains(err.Error(), oldSecret) {
			t.Errorf("ParseKeys(%q) = %v: the error shows the secret", bad, err)
		}
	}
}

// TestCheck: a voucher that does not require a token needs none; one that
// does is refused with the code for a missing token, a bad one, and a
// service without keys.
func TestCheck(t *testing.T) {
	keys, _ := checkout.ParseKeys("k1:" + oldSecret)
	now := time.Unix(1_800_000_000, 0)
	open := voucher.Voucher{Code: "V"}
	guarded := voucher.Voucher{Code: "V", Terms: voucher.Terms{RequireCheckoutToken: true}}
	good := keys.Mint("V", 7, now.Add(time.Minute))
	tests := []struct {
		name  string
		keys  checkout.Keys
		v     voucher.Voucher
		token string
		want  string
	}{
		{"not required, no token", keys, open, "", ""},
		{"not required, no keys", nil, open, "garbage", ""},
		{"required, valid", keys, guarded, good, ""},
		{"required, missing", keys, guarded, "", voucher.CodeCheckoutTokenRequired},
		{"required, invalid", keys, guarded, good + "x", voucher.CodeCheckoutTokenInvalid},
		{"required, no keys", nil, guarded, good, voucher.CodeCheckoutTokenUnconfigured},
	}
	for _, tt := range tests {
		if got := voucher.ErrorCode(tt.keys.Check(tt.v, tt.token, 7, now)); got != tt.want {
			t.Errorf("%s: Check = %q, want %q", tt.name, got, tt.want)
		}
	}
}
