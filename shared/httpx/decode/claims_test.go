package decode_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/httpx/decode"
	"github.com/flashgate/flashgate/shared/voucher"
)

const okClaim = `{"customerId":1,"orderId":"a","orderAmount":5}`

// batchSeeds are bodies of the ledger's batch route: what the proxy sends and
// the hostile shapes it must refuse.
var batchSeeds = []string{
	`{"claims":[` + okClaim + `]}`,
	` {"claims" : [ ` + okClaim + ` , {"orderAmount":7,"orderId":"b","customerId":2} ] } `,
	`{"claims":[null]}`,
	`{"claims":[{}]}`,
	`{"claims":[]}`,
	`{"claims":null}`,
	`{}`,
	`[]`,
	`null`,
	``,
	`{"claims":5}`,
	`{"claims":"x"}`,
	`{"claims":{"customerId":1}}`,
	`{"claims":[5]}`,
	`{"claims":[[` + okClaim + `]]}`,
	`{"Claims":[` + okClaim + `]}`,
	`{"claims":[` + okClaim + `],"claims":[` + okClaim + `]}`,
	`{"claims":[` + okClaim + `],"extra":1}`,
	`{"claims":[{"customerId":1,"customerId":2,"orderId":"a","orderAmount":5}]}`,
	`{"claims":[{"CustomerId":1,"orderId":"a","orderAmount":5}]}`,
	`{"claims":[{"customerId":1,"orderId":"a","orderAmount":5,"x":1}]}`,
	`{"claims":[{"customerId":1.5,"orderId":"a","orderAmount":5}]}`,
	`{"claims":[` + okClaim + `]}x`,
	`{"claims":[` + okClaim + `,]}`,
	`{"claims":[` + okClaim,
	`{"claims":[` + okClaim + `]`,
	`{"claims\u0000":[` + okClaim + `]}`,
}

// FuzzDecodeClaims: the batch tokenizer never panics, refuses with 400
// INVALID_REQUEST and a message, and accepts nothing encoding/json would
// refuse, with the same values (it is stricter: it also refuses duplicate,
// case-folded and unknown keys inside a claim).
func FuzzDecodeClaims(f *testing.F) {
	for _, s := range batchSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decode.DecodeClaims(body)
		if err != nil {
			checkInvalid(t, "DecodeClaims", body, err)
			return
		}
		var slow struct {
			Claims []api.ReserveRequest `json:"claims"`
		}
		if err := decode.DecodeGeneric(body, &slow); err != nil {
			t.Fatalf("DecodeClaims(%q) accepted what encoding/json refuses: %v", body, err)
		}
		require.Len(t, slow.Claims, len(got), "%q", body)
		for i := range got {
			if show(got[i]) != show(slow.Claims[i]) {
				t.Fatalf("DecodeClaims(%q) claim %d read %s, encoding/json read %s", body, i, show(got[i]), show(slow.Claims[i]))
			}
		}
	})
}

// The batch body's shape, claim by claim: what is read and what is refused.
func TestDecodeClaims(t *testing.T) {
	got, err := decode.DecodeClaims([]byte(batchSeeds[1]))
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, `{"customerId":2,"orderId":"b","orderAmount":7}`, show(got[1]))

	for _, body := range []string{`{"claims":[]}`, `{"claims":null}`, `{}`, `{"claims":[null]}`} {
		_, err := decode.DecodeClaims([]byte(body))
		assert.NoError(t, err, "%s: read; BindClaims refuses it as it validates", body)
	}
	for _, body := range batchSeeds[7:] {
		_, err := decode.DecodeClaims([]byte(body))
		if assert.Error(t, err, "%q", body) {
			checkInvalid(t, "DecodeClaims", []byte(body), err)
		}
	}
	_, err = decode.DecodeClaims([]byte(`{"claims":[{"customerId":1,"customerId":2,"orderId":"a","orderAmount":5}]}`))
	assert.ErrorContains(t, err, `claims[0]: duplicate field "customerId"`)

	max := make([]string, api.MaxBatchClaims)
	for i := range max {
		max[i] = fmt.Sprintf(`{"customerId":%d,"orderId":"o%d","orderAmount":5}`, i+1, i)
	}
	got, err = decode.DecodeClaims([]byte(`{"claims":[` + strings.Join(max, ",") + `]}`))
	require.NoError(t, err)
	assert.Len(t, got, api.MaxBatchClaims)
	_, err = decode.DecodeClaims([]byte(`{"claims":[` + strings.Join(max, ",") + `,` + okClaim + `]}`))
	assert.ErrorContains(t, err, fmt.Sprintf("claims must hold 1 to %d items", api.MaxBatchClaims))
}

// onceReader is a body that can be read once: a second reading finds it empty.
type onceReader struct {
	r     *strings.Reader
	reads int
}

func (o *onceReader) Read(p []byte) (int, error) {
	o.reads++
	return o.r.Read(p)
}

func (o *onceReader) Close() error { return nil }

// PeekClaim (a middleware's) and BindClaim (the handler's) read and decode a
// reserve body once between them: the handler gets what the middleware
// found, the claim or its refusal, and the body is not read again.
func TestPeekThenBindReadsTheBodyOnce(t *testing.T) {
	gin.SetMode(gin.TestMode)
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{okClaim, true},
		{`{"customerId":0,"orderId":"a","orderAmount":5}`, false},
		{`{"customerId":1`, false},
	} {
		ctx, _ := gin.CreateTestContext(httptest.NewRecorder())
		body := &onceReader{r: strings.NewReader(c.body)}
		ctx.Request = httptest.NewRequest(http.MethodPost, "/vouchers/X/reservations", body)
		ctx.Request.Header.Set("Content-Type", "application/json")
		peeked, ok := decode.PeekClaim(ctx)
		require.Equal(t, c.ok, ok, c.body)
		reads := body.reads
		again, ok2 := decode.PeekClaim(ctx)
		bound, err := decode.BindClaim(ctx)
		assert.Equal(t, reads, body.reads, "%s: the body was read again after PeekClaim", c.body)
		assert.Equal(t, io.ReadCloser(body), ctx.Request.Body, "%s: no copy of the body was put back to be read again", c.body)
		assert.Equal(t, peeked, again, c.body)
		assert.Equal(t, c.ok, ok2, c.body)
		if c.ok {
			require.NoError(t, err, c.body)
			assert.Equal(t, voucher.Claim{CustomerID: 1, OrderID: "a", OrderAmount: 5}, bound)
		} else {
			assert.Equal(t, voucher.CodeInvalidRequest, voucher.ErrorCode(err), "%s: %v", c.body, err)
		}
	}
}
