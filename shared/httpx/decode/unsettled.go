package decode

import (
	"bytes"
	"encoding/json"

	"github.com/gin-gonic/gin"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// BindUnsettled reads and validates UnsettledPath's body: {"orderIds": [...]}
// with 1 to api.MaxBatchClaims valid orderIds, nothing else.
func BindUnsettled(c *gin.Context) ([]string, error) {
	body, err := readBody(c, api.MaxBatchBytes)
	if err != nil {
		return nil, err
	}
	defer body.release()
	dec := json.NewDecoder(bytes.NewReader(body.b))
	dec.DisallowUnknownFields()
	var u api.UnsettledBody
	if err := dec.Decode(&u); err != nil || dec.More() {
		return nil, invalidJSON("the body must be {\"orderIds\": [...]}")
	}
	if len(u.OrderIDs) == 0 || len(u.OrderIDs) > api.MaxBatchClaims {
		return nil, invalidJSON("orderIds must hold 1 to %d items", api.MaxBatchClaims)
	}
	for _, id := range u.OrderIDs {
		if !voucher.ValidOrderID(id) {
			return nil, invalidJSON("orderId %q is not valid", id)
		}
	}
	return u.OrderIDs, nil
}
