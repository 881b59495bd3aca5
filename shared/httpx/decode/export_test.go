package decode

import "github.com/flashgate/flashgate/shared/api"

// DecodeGeneric is the encoding/json path that every body but the reserve
// body takes: the reserve tokenizer is compared with it.
var DecodeGeneric = decodeGeneric

// DecodeClaims is the batch route's tokenizer (claims.go), its claims as
// the requests encoding/json would fill.
func DecodeClaims(body []byte) ([]api.ReserveRequest, error) {
	fields, err := decodeClaims(body, api.MaxBatchClaims)
	if err != nil {
		return nil, err
	}
	out := make([]api.ReserveRequest, len(fields))
	for i := range fields {
		fields[i].request(&out[i])
	}
	return out, nil
}
