package decode

import (
	"errors"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The reserve body is the one every flash-sale request carries, so it is read
// by a tokenizer of its own, in one pass over the bytes: the object, its three
// keys spelled exactly (no case folding, no duplicates, nothing else), each
// value's type and range, and nothing after the object. It accepts exactly the
// bodies that encoding/json followed by checkKeys accepts, with the same
// values (FuzzDecodeReserveRequest compares the two), and allocates only the
// orderId string.

// The reserve body's keys, as bits of claimFields.seen and .set.
const (
	fieldCustomer = 1 << iota
	fieldOrder
	fieldAmount
)

// claimFields is a reserve body as read: seen marks a key that was present
// (null included), set one that carried a value.
type claimFields struct {
	customerID, orderAmount int64
	orderID                 string
	seen, set               uint8
}

// request returns the fields as the ReserveRequest encoding/json would fill.
func (f *claimFields) request(dst *api.ReserveRequest) {
	*dst = api.ReserveRequest{}
	if f.set&fieldCustomer != 0 {
		v := f.customerID
		dst.CustomerID = &v
	}
	if f.set&fieldOrder != 0 {
		v := f.orderID
		dst.OrderID = &v
	}
	if f.set&fieldAmount != 0 {
		v := f.orderAmount
		dst.OrderAmount = &v
	}
}

// claim validates the fields as ReserveRequest.Validate does, without the
// pointers (which would cost an allocation each).
func (f *claimFields) claim() (voucher.Claim, error) {
	var req api.ReserveRequest
	if f.set&fieldCustomer != 0 {
		req.CustomerID = &f.customerID
	}
	if f.set&fieldOrder != 0 {
		req.OrderID = &f.orderID
	}
	if f.set&fieldAmount != 0 {
		req.OrderAmount = &f.orderAmount
	}
	return req.Validate()
}

// decodeClaim reads body (untrimmed) into f.
func decodeClaim(body []byte, f *claimFields) error {
	s := jsonScanner{b: body}
	return s.body(func() error { return s.members(f) })
}

// members reads a reserve body's `"key": value` pairs up to and including the
// closing brace.
func (s *jsonScanner) members(f *claimFields) error {
	var bit uint8
	return s.object(func(key []byte) error {
		switch string(key) {
		case "customerId":
			bit = fieldCustomer
		case "orderId":
			bit = fieldOrder
		case "orderAmount":
			bit = fieldAmount
		default:
			return invalidJSON("unknown field %q", printable(key))
		}
		if f.seen&bit != 0 {
			return invalidJSON("duplicate field %q", key)
		}
		f.seen |= bit
		return nil
	}, func() error { return s.value(f, bit) })
}

// value reads the value of the field bit into f.
func (s *jsonScanner) value(f *claimFields, bit uint8) error {
	c := s.peek()
	if c == 'n' {
		return s.literal("null")
	}
	if bit == fieldOrder {
		if c != '"' {
			return s.wrongType("orderId")
		}
		v, err := s.str()
		if err != nil {
			return err
		}
		f.orderID = string(v)
		f.set |= bit
		return nil
	}
	if c != '-' && (c < '0' || c > '9') {
		return s.wrongType(fieldName(bit))
	}
	n, err := s.integer(fieldName(bit))
	if err != nil {
		return err
	}
	if bit == fieldCustomer {
		f.customerID = n
	} else {
		f.orderAmount = n
	}
	f.set |= bit
	return nil
}

func fieldName(bit uint8) string {
	switch bit {
	case fieldCustomer:
		return "customerId"
	case fieldOrder:
		return "orderId"
	}
	return "orderAmount"
}

// BindClaim reads and validates the body of a reserve request: what
// BindJSON into a api.ReserveRequest and its Validate do, in one pass over
// the body and without an allocation but the orderId. The body is read and
// decoded once per request: after PeekClaim, BindClaim answers from what it
// found.
func BindClaim(c *gin.Context) (voucher.Claim, error) {
	if b := peeked(c); b != nil {
		return b.cl, b.err
	}
	b := readClaim(c)
	return b.cl, b.err
}

// PeekClaim reads and validates the reserve body as BindClaim does, for a
// middleware that must know the claim before the handler (the shedder's
// Spare, the edge's limits). ok is false when the body is not a valid claim
// (the handler refuses it as usual). What it read is kept in c, and the
// handler's BindClaim answers from it: the body is read and decoded once.
func PeekClaim(c *gin.Context) (cl voucher.Claim, ok bool) {
	b := peeked(c)
	if b == nil {
		read := readClaim(c)
		b = &read
		c.Set(boundClaimKey, b)
	}
	return b.cl, b.err == nil
}

// ReadClaim reads and validates the reserve body as BindClaim does, for a
// caller that keeps what it found itself, beside what else it learns of the
// request (the proxy's guard): nothing is kept in c, and a BindClaim after it
// would find the body consumed.
func ReadClaim(c *gin.Context) (voucher.Claim, error) {
	b := readClaim(c)
	return b.cl, b.err
}

// boundClaim is a request's reserve body as read once: kept in its context
// under boundClaimKey by PeekClaim.
type boundClaim struct {
	cl  voucher.Claim
	err error
}

const boundClaimKey = "flashgate.claim"

// peeked is what PeekClaim kept in c, nil when it has not read c's body.
func peeked(c *gin.Context) *boundClaim {
	if v, ok := c.Get(boundClaimKey); ok {
		return v.(*boundClaim)
	}
	return nil
}

// readClaim reads and decodes c's reserve body (which it consumes).
func readClaim(c *gin.Context) (b boundClaim) {
	body, err := readBody(c, MaxBodyBytes)
	if err != nil {
		b.err = err
		return b
	}
	defer body.release()
	var f claimFields
	if b.err = decodeClaim(body.b, &f); b.err != nil {
		return b
	}
	b.cl, b.err = f.claim()
	return b
}

// The ledger's batch route (what one coalesced round admitted) carries
// {"claims": [claim, ...]}, one reserve body per claim. It is read in one pass
// as the reserve body is (above): the object's one key spelled exactly,
// an array of at most api.MaxBatchClaims objects (null is an empty claim), each
// claim's keys spelled exactly, once, with their types, and nothing after.

// BindClaims reads and validates the batch route's body: 1 to api.MaxBatchClaims
// claims, each valid as a reserve body; a refusal names the claim.
func BindClaims(c *gin.Context) ([]voucher.Claim, error) {
	body, err := readBody(c, api.MaxBatchBytes)
	if err != nil {
		return nil, err
	}
	defer body.release()
	fields, err := decodeClaims(body.b, api.MaxBatchClaims)
	if err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		return nil, batchSizeError()
	}
	claims := make([]voucher.Claim, len(fields))
	for i := range fields {
		if claims[i], err = fields[i].claim(); err != nil {
			return nil, claimError(i, err)
		}
	}
	return claims, nil
}

func batchSizeError() error {
	return invalidJSON("claims must hold 1 to %d items", api.MaxBatchClaims)
}

// claimError names claim i in a refusal of it.
func claimError(i int, err error) error {
	var ve *voucher.Error
	if errors.As(err, &ve) {
		return invalidJSON("claims[%d]: %s", i, ve.Message)
	}
	return err
}

// decodeClaims reads a batch body (untrimmed); more than max claims is refused
// as soon as the next one starts.
func decodeClaims(body []byte, max int) ([]claimFields, error) {
	s := jsonScanner{b: body}
	var out []claimFields
	if err := s.body(func() error { return s.batchMembers(&out, max) }); err != nil {
		return nil, err
	}
	return out, nil
}

// batchMembers reads the batch object's members up to its closing brace: only
// "claims", once.
func (s *jsonScanner) batchMembers(out *[]claimFields, max int) error {
	seen := false
	return s.object(func(key []byte) error {
		if string(key) != "claims" {
			return invalidJSON("unknown field %q", printable(key))
		}
		if seen {
			return invalidJSON("duplicate field %q", key)
		}
		seen = true
		return nil
	}, func() error {
		var err error
		*out, err = s.claimArray(max)
		return err
	})
}

// claimArray reads the claims' array (or null).
func (s *jsonScanner) claimArray(max int) ([]claimFields, error) {
	switch s.peek() {
	case 'n':
		return nil, s.literal("null")
	case '[':
		s.i++
	default:
		return nil, s.wrongType("claims")
	}
	s.space()
	if s.peek() == ']' {
		s.i++
		return nil, nil
	}
	out := make([]claimFields, 0, 16)
	for {
		s.space()
		if len(out) == max {
			return nil, batchSizeError()
		}
		var f claimFields
		switch s.peek() {
		case 'n':
			if err := s.literal("null"); err != nil {
				return nil, err
			}
		case '{':
			if err := s.objectAt(func() error { return s.members(&f) }); err != nil {
				return nil, claimError(len(out), err)
			}
		default:
			return nil, claimError(len(out), s.wrongType("claim"))
		}
		out = append(out, f)
		s.space()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return out, nil
		default:
			return nil, s.malformed()
		}
	}
}
