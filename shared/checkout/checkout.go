// Package checkout signs and verifies the checkout tokens that bind a reserve
// to a shop's own checkout session (or captcha): a voucher that requires one
// (requireCheckoutToken) is reserved only with a token minted for its code and
// the customer, before its expiry, with a key the proxy knows.
//
// A token is v1.<keyId>.<expiryUnix>.<mac>, where mac is the unpadded
// base64url HMAC-SHA256, under the key's secret, of
// "<voucherCode>|<customerId>|<expiryUnix>". It travels in the
// X-Checkout-Token header (api.HeaderCheckoutToken).
package checkout

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version is the first field of every token this package mints.
const Version = "v1"

// MinSecret is the shortest secret a key may have, in bytes.
const MinSecret = 16

// Key is one signing key: an id that tokens name and its shared secret.
type Key struct {
	ID     string
	Secret []byte
}

// Keys are the keys a proxy accepts, in CHECKOUT_TOKEN_SECRET's order: a shop
// signs with the first (Mint), and every listed key verifies, so a secret is
// rotated by listing the new key first and dropping the old one once no
// token signed with it is still unexpired.
type Keys []Key

// ParseKeys reads CHECKOUT_TOKEN_SECRET: "keyId:secret[,keyId:secret...]".
// A key id is 1 to 32 of [A-Za-z0-9_-]; a secret is everything after the
// first colon (no comma), at least MinSecret bytes. Empty is no keys (nil).
func ParseKeys(s string) (Keys, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var keys Keys
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, secret, ok := strings.Cut(strings.TrimSpace(part), ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("checkout key %q: want keyId:secret", redact(part))
		case !validID(id):
			return nil, fmt.Errorf("checkout key id %q: want 1 to 32 of [A-Za-z0-9_-]", id)
		case len(secret) < MinSecret:
			return nil, fmt.Errorf("checkout key %s: the secret must be at least %d bytes", id, MinSecret)
		case seen[id]:
			return nil, fmt.Errorf("checkout key id %s is listed twice", id)
		}
		seen[id] = true
		keys = append(keys, Key{ID: id, Secret: []byte(secret)})
	}
	return keys, nil
}

// redact keeps a malformed entry's secret out of an error message.
func redact(part string) string {
	if len(part) > 4 {
		return part[:4] + "..."
	}
	return part
}

func validID(id string) bool {
	if len(id) == 0 || len(id) > 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Mint returns a token for voucher code and customerID, valid until expiry
// (to the second), signed with key.
func Mint(key Key, code string, customerID int64, expiry time.Time) string {
	exp := strconv.FormatInt(expiry.Unix(), 10)
	return Version + "." + key.ID + "." + exp + "." + base64.RawURLEncoding.EncodeToString(mac(key.Secret, code, customerID, exp))
}

// Mint signs with the first key (the current one); it panics on no keys,
// which is a caller's mistake, never a request's.
func (k Keys) Mint(code string, customerID int64, expiry time.Time) string {
	return Mint(k[0], code, customerID, expiry)
}

func mac(secret []byte, code string, customerID int64, exp string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(code + "|" + strconv.FormatInt(customerID, 10) + "|" + exp))
	return h.Sum(nil)
}

// Why a token was refused; Verify wraps each in ErrInvalid.
var (
	ErrInvalid    = errors.New("invalid checkout token")
	errMalformed  = errors.New("malformed")
	errUnknownKey = errors.New("unknown key id")
	errExpired    = errors.New("expired")
	errSignature  = errors.New("signature does not match this voucher and customer")
)

// Verify checks token for voucher code and customerID at now: a known key id,
// an expiry after now, and a MAC (compared in constant time) over this code
// and customer. Any failure wraps ErrInvalid with why, for the logs.
func (k Keys) Verify(token, code string, customerID int64, now time.Time) error {
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != Version {
		return fmt.Errorf("%w: %w", ErrInvalid, errMalformed)
	}
	exp, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || exp <= 0 || parts[2] != strconv.FormatInt(exp, 10) {
		return fmt.Errorf("%w: %w: expiry", ErrInvalid, errMalformed)
	}
	got, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(got) != sha256.Size {
		return fmt.Errorf("%w: %w: mac", ErrInvalid, errMalformed)
	}
	var key *Key
	for i := range k {
		if k[i].ID == parts[1] {
			key = &k[i]
			break
		}
	}
	if key == nil {
		return fmt.Errorf("%w: %w %q", ErrInvalid, errUnknownKey, parts[1])
	}
	if !hmac.Equal(got, mac(key.Secret, code, customerID, parts[2])) {
		return fmt.Errorf("%w: %w", ErrInvalid, errSignature)
	}
	if now.Unix() >= exp {
		return fmt.Errorf("%w: %w", ErrInvalid, errExpired)
	}
	return nil
}
