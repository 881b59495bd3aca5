package httpx

import (
	"errors"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// The ledger's batch route (what one coalesced round admitted) carries
// {"claims": [claim, ...]}, one reserve body per claim. It is read in one pass
// as the reserve body is (claimjson.go): the object's one key spelled exactly,
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
	s := claimScanner{b: body}
	var out []claimFields
	if err := s.body(func() error { return s.batchMembers(&out, max) }); err != nil {
		return nil, err
	}
	return out, nil
}

// batchMembers reads the batch object's members up to its closing brace: only
// "claims", once.
func (s *claimScanner) batchMembers(out *[]claimFields, max int) error {
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
func (s *claimScanner) claimArray(max int) ([]claimFields, error) {
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
