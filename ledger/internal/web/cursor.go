package web

import (
	"encoding/base64"
	"strconv"

	"github.com/flashgate/flashgate/shared/voucher"
)

// Page sizes of the admin listings.
const (
	defaultPageSize = 100
	maxPageSize     = 500
)

// A cursor is opaque to clients: base64url (no padding) of the last item's
// key, a voucher code or a reservation id.

// nextCursor is the cursor of the page after the one whose last key is key.
func nextCursor(key string) *string {
	c := encodeCursor(key)
	return &c
}

func encodeCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

func decodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 {
		return "", voucher.Errorf(voucher.CodeInvalidRequest, "cursor must be a nextCursor this route answered")
	}
	return string(b), nil
}

// decodeCodeCursor decodes a cursor of GET /admin/vouchers: a voucher code.
func decodeCodeCursor(c string) (string, error) {
	code, err := decodeCursor(c)
	if err == nil && !voucher.ValidCode(code) {
		err = voucher.Errorf(voucher.CodeInvalidRequest, "cursor must be a nextCursor this route answered")
	}
	return code, err
}

// decodeIDCursor decodes a cursor of a reservations listing: a row id.
func decodeIDCursor(c string) (int64, error) {
	s, err := decodeCursor(c)
	if err != nil {
		return 0, err
	}
	id, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
		return 0, voucher.Errorf(voucher.CodeInvalidRequest, "cursor must be a nextCursor this route answered")
	}
	return id, nil
}
