package httpxtest

import "testing"

// TestShapeOf: answers that differ only in values share a shape; another
// key, another kind of value, another error code or status does not.
func TestShapeOf(t *testing.T) {
	same := [][2]string{
		{`{"orderId":"a","discountAmount":1}`, `{"discountAmount":22,"orderId":"bb"}`},
		{`{"events":[{"id":1},{"id":2}],"nextAfter":2}`, `{"events":[{"id":3}],"nextAfter":3}`},
		{`{"error":"OUT_OF_STOCK","message":"x"}`, `{"error":"OUT_OF_STOCK","message":"y"}`},
		{"order_id\n1\n", "order_id\n2\n3\n"},
	}
	for _, c := range same {
		if a, b := shapeOf([]byte(c[0])), shapeOf([]byte(c[1])); a != b {
			t.Errorf("shapeOf(%s) = %s, shapeOf(%s) = %s: want one shape", c[0], a, c[1], b)
		}
	}
	differ := [][2]string{
		{`{"orderId":"a"}`, `{"orderId":"a","x":1}`},
		{`{"resolution":null}`, `{"resolution":"replayed"}`},
		{`{"events":[]}`, `{"events":[{"id":1}]}`},
		{`{"error":"OUT_OF_STOCK","message":"x"}`, `{"error":"ALREADY_USED","message":"x"}`},
		{`{"status":"CONFIRMED"}`, `{"status":"REFUNDED"}`},
		{`{"reservations":[{"status":"RESERVED"}]}`, `{"reservations":[{"status":"RELEASED"}]}`},
		{``, `{}`},
	}
	for _, c := range differ {
		if a, b := shapeOf([]byte(c[0])), shapeOf([]byte(c[1])); a == b {
			t.Errorf("shapeOf(%s) = shapeOf(%s) = %s: want two shapes", c[0], c[1], a)
		}
	}
}
