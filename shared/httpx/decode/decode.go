// Package decode reads requests strictly: one JSON object, no unknown fields,
// no trailing data, bounded bodies (BindJSON); the reserve claims by a scanner
// of their own (BindClaim, PeekClaim, BindClaims); path parameters validated
// (CodeParam, OrderParams). Errors are domain errors that name the field.
package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 16 << 10

// BindJSON decodes the request body into dst strictly: one JSON object, no
// unknown fields, no trailing data, at most MaxBodyBytes. Errors name the field.
func BindJSON(c *gin.Context, dst any) error { return BindJSONLimit(c, dst, MaxBodyBytes) }

// BindJSONLimit is BindJSON with another body limit (the internal batch route).
func BindJSONLimit(c *gin.Context, dst any, limit int) error {
	body, err := readBody(c, limit)
	if err != nil {
		return err
	}
	defer body.release()
	return JSON(body.b, dst)
}

// pooledBody is a request body read into a buffer that goes back to bodyPool.
type pooledBody struct {
	b   []byte
	ptr *[]byte
}

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBody bounds the buffers kept for reuse (the batch route's bodies
// are larger and rarer).
const maxPooledBody = MaxBodyBytes + 1

func (p pooledBody) release() {
	if cap(p.b) <= maxPooledBody {
		*p.ptr = p.b[:0]
		bodyPool.Put(p.ptr)
	}
}

// readBody checks the Content-Type and reads at most limit bytes of the body.
func readBody(c *gin.Context, limit int) (pooledBody, error) {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		return pooledBody{}, voucher.Errorf(voucher.CodeInvalidRequest, "Content-Type must be application/json")
	}
	p := pooledBody{ptr: bodyPool.Get().(*[]byte)}
	buf := (*p.ptr)[:0]
	for r := c.Request.Body; r != nil && len(buf) <= limit; {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), limit+1-len(buf)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit+1)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			p.b = buf
			p.release()
			return pooledBody{}, voucher.Errorf(voucher.CodeInvalidRequest, "cannot read the request body")
		}
	}
	p.b = buf
	if len(buf) > limit {
		p.release()
		return pooledBody{}, voucher.Errorf(voucher.CodeInvalidRequest, "request body is larger than %d bytes", limit)
	}
	return p, nil
}

// JSON is the decoding half of BindJSON, separate so that it can be
// fuzzed. A reserve body (*api.ReserveRequest) is read by its own
// one-pass tokenizer (claims.go, over jsonscan.go); any other by decodeGeneric.
func JSON(body []byte, dst any) error {
	if req, ok := dst.(*api.ReserveRequest); ok {
		var f claimFields
		if err := decodeClaim(body, &f); err != nil {
			return err
		}
		f.request(req)
		return nil
	}
	return decodeGeneric(body, dst)
}

// decodeGeneric decodes body with encoding/json, then checks its keys.
func decodeGeneric(body []byte, dst any) error {
	// Only JSON's own whitespace (RFC 8259): bytes.TrimSpace would also take
	// \v, \f, U+0085 and U+00A0, and accept a body no JSON parser would.
	trimmed := bytes.Trim(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return voucher.Errorf(voucher.CodeInvalidRequest, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return voucher.Errorf(voucher.CodeInvalidRequest, "%s", describeJSONError(err))
	}
	if dec.More() {
		return voucher.Errorf(voucher.CodeInvalidRequest, "request body has data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return voucher.Errorf(voucher.CodeInvalidRequest, "request body has data after the JSON object")
	}
	return checkKeys(trimmed, dst)
}

// checkKeys refuses a top-level key that appears twice or is not spelled exactly
// as one of dst's json names. encoding/json keeps the last of duplicate keys and
// matches keys case-insensitively (with Unicode folding: "cuſtomerId" is
// customerId), so without this a body could read one way to a gateway or log in
// front of us and another way to us. body has been decoded without error.
func checkKeys(body []byte, dst any) error {
	names := jsonNames(reflect.TypeOf(dst))
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return voucher.Errorf(voucher.CodeInvalidRequest, "malformed JSON")
	}
	seen := make(map[string]bool, len(names))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return voucher.Errorf(voucher.CodeInvalidRequest, "malformed JSON")
		}
		key, _ := tok.(string)
		switch {
		case seen[key]:
			return voucher.Errorf(voucher.CodeInvalidRequest, "duplicate field %q", key)
		case len(names) > 0 && !names[key]:
			return voucher.Errorf(voucher.CodeInvalidRequest, "unknown field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return voucher.Errorf(voucher.CodeInvalidRequest, "malformed JSON")
		}
	}
	return nil
}

func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field != "" {
			return fmt.Sprintf("%s: wrong type or out of range (got %s)", typeErr.Field, typeErr.Value)
		}
		return fmt.Sprintf("request body must be a JSON object (got %s)", typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d", syntaxErr.Offset)
	case errors.As(err, &timeErr):
		return "times must be RFC 3339, e.g. 2026-12-01T10:00:00Z"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return "malformed JSON"
}

var jsonNamesOf sync.Map // reflect.Type -> map[string]bool

// jsonNames returns the json field names of the struct t points to (empty for
// anything else), computed once per type.
func jsonNames(t reflect.Type) map[string]bool {
	if names, ok := jsonNamesOf.Load(t); ok {
		return names.(map[string]bool)
	}
	names := map[string]bool{}
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		for f := range t.Elem().Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				names[name] = true
			}
		}
	}
	jsonNamesOf.Store(t, names)
	return names
}

// CodeParam returns the validated :code path parameter.
func CodeParam(c *gin.Context) (string, error) {
	code := c.Param("code")
	if !voucher.ValidCode(code) {
		return "", voucher.Errorf(voucher.CodeInvalidRequest, "code must match ^[A-Za-z0-9_-]{1,32}$")
	}
	return code, nil
}

// OrderParams returns the validated :code and :orderId path parameters.
func OrderParams(c *gin.Context) (code, orderID string, err error) {
	if code, err = CodeParam(c); err != nil {
		return "", "", err
	}
	orderID = c.Param("orderId")
	if !voucher.ValidOrderID(orderID) {
		return "", "", voucher.Errorf(voucher.CodeInvalidRequest, "orderId must match ^[A-Za-z0-9_.:-]{1,64}$")
	}
	return code, orderID, nil
}
