package systemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// linClient sends the four calls to the proxy and turns the answers into
// linResults; it never fails the test, since under faults errors are expected.
type linClient struct {
	http  *http.Client
	base  string // proxy URL
	code  string
	order func(uint8) string
}

func (c linClient) do(op linOp) (linResult, string) {
	path := c.base + "/vouchers/" + c.code + "/reservations"
	var method string
	var body []byte
	switch op.Kind {
	case linReserve:
		method = http.MethodPost
		body, _ = json.Marshal(map[string]any{
			"customerId": op.Customer, "orderId": c.order(op.Order), "orderAmount": 5_000,
		})
	case linConfirm:
		method, path = http.MethodPost, path+"/"+c.order(op.Order)+"/confirm"
	case linRelease:
		method, path = http.MethodDelete, path+"/"+c.order(op.Order)
	case linGet:
		method, path = http.MethodGet, path+"/"+c.order(op.Order)
	}
	req, err := http.NewRequest(method, path, bytes.NewReader(body))
	if err != nil {
		return linResult{}, err.Error()
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return linResult{}, err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	note := fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(raw))
	// A 429 RATE_LIMITED (a retry sent before its Retry-After) decided
	// nothing; like a 5xx, the history takes it as unknown, which is sound.
	if err != nil || resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return linResult{}, note
	}
	var b struct {
		Error, Status string
		CustomerID    int64
	}
	_ = json.Unmarshal(raw, &b)
	r := linResult{Status: resp.StatusCode, Code: b.Error}
	if resp.StatusCode == http.StatusOK {
		r.Code, r.Customer = b.Status, uint8(b.CustomerID)
	}
	return r, note
}
