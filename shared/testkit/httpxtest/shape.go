package httpxtest

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// perShape is how many answers of one shape CheckAnswer validates in a test
// binary. kin-openapi's validator for OpenAPI 3.1 compiles the schema again
// at every call (about 0.6 ms an answer on the 2-core machine), so validating
// each of a burst's thousands of 201s took CPU from the services the burst
// measures; a shape seen perShape times has shown what it can.
const perShape = 20

// seenShapes counts the answers validated, by method, route, status and
// shape.
var seenShapes sync.Map // string -> *atomic.Int32

// firstOfShape reports whether an answer of this kind is among the first
// perShape of its shape, and so is to be validated.
func firstOfShape(kind string, body []byte) bool {
	n, _ := seenShapes.LoadOrStore(kind+" "+shapeOf(body), new(atomic.Int32))
	return n.(*atomic.Int32).Add(1) <= perShape
}

// shapeOf describes a JSON body by its structure: each object's keys with
// the kinds of their values, each array's distinct element shapes, and the
// values of the keys that name a case (an error code, a status, an event
// type, a reason: each from a short list), so that a new code or status is
// validated anew. A
// body that is not JSON (a CSV export, the metrics) is one shape.
func shapeOf(body []byte) string {
	var v any
	if len(body) == 0 {
		return "empty"
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "raw"
	}
	var b strings.Builder
	writeShape(&b, v)
	return b.String()
}

// caseKeys are the keys whose values are part of a shape.
var caseKeys = []string{"error", "status", "type", "reason"}

func writeShape(b *strings.Builder, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for _, k := range keys {
			b.WriteString(k)
			b.WriteByte(':')
			if s, ok := v[k].(string); ok && slices.Contains(caseKeys, k) {
				b.WriteString("=" + s)
			} else {
				writeShape(b, v[k])
			}
			b.WriteByte(',')
		}
		b.WriteByte('}')
	case []any:
		var seen []string
		for _, e := range v {
			var eb strings.Builder
			writeShape(&eb, e)
			if s := eb.String(); !slices.Contains(seen, s) {
				seen = append(seen, s)
			}
		}
		b.WriteString("[" + strings.Join(seen, "|") + "]")
	case string:
		b.WriteByte('s')
	case float64:
		b.WriteByte('n')
	case bool:
		b.WriteByte('b')
	case nil:
		b.WriteByte('0')
	}
}
