package gate

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/shared/voucher"
)

// The decoders take whatever go-redis hands back for a script reply. These fuzz
// targets build such values (nested arrays of integers, strings, nils and the
// RESP3 types a misconfigured client could return) from the fuzz input and check
// that the decoders never panic and never accept a reply that breaks their
// contract.

// replyReader turns fuzz bytes into a reply value. The format (one tag byte per
// value, see value) is what encodeReply writes, so seeds read as Go values.
type replyReader struct{ b []byte }

func (r *replyReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *replyReader) uint64() uint64 {
	var buf [8]byte
	n := copy(buf[:], r.b)
	r.b = r.b[n:]
	return binary.BigEndian.Uint64(buf[:])
}

const (
	tagSmallInt = iota // int64(int8(next byte))
	tagInt             // int64 from the next 8 bytes
	tagString          // length byte (mod 64), then the bytes
	tagDecimal         // the decimal string of an int64 from the next 8 bytes
	tagSmallDec        // the decimal string of int8(next byte)
	tagNil             // nil (a Lua false or missing hash field)
	tagArray           // count byte (mod 32), then the elements
	tagOther           // a type reserve/state/meta never return: float64, bool, int, []string, map
	tagCount
)

const maxReplyDepth = 4

func (r *replyReader) value(depth int) any {
	switch r.byte() % tagCount {
	case tagSmallInt:
		return int64(int8(r.byte()))
	case tagInt:
		return int64(r.uint64())
	case tagString:
		n := int(r.byte() % 64)
		n = min(n, len(r.b))
		s := string(r.b[:n])
		r.b = r.b[n:]
		return s
	case tagDecimal:
		return strconv.FormatInt(int64(r.uint64()), 10)
	case tagSmallDec:
		return strconv.Itoa(int(int8(r.byte())))
	case tagNil:
		return nil
	case tagArray:
		n := int(r.byte() % 32)
		if depth >= maxReplyDepth {
			return []any{}
		}
		arr := make([]any, 0, n)
		for i := 0; i < n && len(r.b) > 0; i++ {
			arr = append(arr, r.value(depth+1))
		}
		return arr
	default:
		switch r.byte() % 6 {
		case 0:
			return math.Float64frombits(r.uint64())
		case 1:
			return r.byte()%2 == 0
		case 2:
			return int(int8(r.byte()))
		case 3:
			return []string{"1", "2"}
		case 4:
			return map[any]any{"remaining": int64(1)}
		default:
			return []byte("1")
		}
	}
}

// encodeReply writes v in replyReader's format: int64, string, nil and []any.
func encodeReply(v any) []byte {
	switch v := v.(type) {
	case int64:
		out := []byte{tagInt, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(out[1:], uint64(v))
		return out
	case string:
		if len(v) >= 64 {
			panic("encodeReply: string too long")
		}
		return append([]byte{tagString, byte(len(v))}, v...)
	case nil:
		return []byte{tagNil}
	case []any:
		if len(v) >= 32 {
			panic("encodeReply: array too long")
		}
		out := []byte{tagArray, byte(len(v))}
		for _, e := range v {
			out = append(out, encodeReply(e)...)
		}
		return out
	}
	panic("encodeReply: unsupported type")
}

func ints(xs ...int64) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// FuzzDecodeReserve: decodeReserve never panics and, when it accepts a reply,
// returns n valid results (RESERVED..TOO_SMALL) read as sent, NOT_LOADED
// for all items or none, and remaining >= 0 whenever a use was taken.
func FuzzDecodeReserve(f *testing.F) {
	seeds := []struct {
		reply any
		n     int
		match bool // use n = len(reply)-1
	}{
		{ints(9, 1), 1, true},
		{ints(0, 1, 1, 3, 4, 2, 6), 6, true},
		{ints(0, 7, 8, 9, 10, 11, 2), 6, true}, // the refusals of issue 12
		{ints(0, 5, 5, 5), 3, true},
		{ints(2, 5, 1), 2, true},        // NOT_LOADED for part of a batch
		{ints(3, 5), 1, true},           // NOT_LOADED with remaining
		{ints(-1, 1), 1, true},          // reserved with negative remaining
		{ints(-4, 3, 3), 2, true},       // negative remaining without a reservation
		{ints(0, 12), 1, true},          // unknown code
		{ints(0, 0), 1, true},           // code 0
		{ints(1, 1), 2, false},          // short reply
		{ints(1), 0, false},             // empty batch
		{[]any{"3", int64(1)}, 1, true}, // remaining as a string
		{[]any{int64(3), "1"}, 1, true},
		{[]any{int64(3), nil}, 1, true},
		{[]any{int64(3), []any{int64(1)}}, 1, true},
		{[]any{}, 1, false},
		{nil, 1, false},
		{int64(1), 1, false},
		{"OK", 1, false},
		{ints(5, 4294967297), 1, true}, // a code that truncates to RESERVED as int32
	}
	for _, s := range seeds {
		f.Add(encodeReply(s.reply), s.n, s.match)
	}
	f.Add([]byte{tagOther, 0, 1, 2, 3, 4, 5, 6, 7, 8}, 1, false)
	f.Add([]byte{tagArray, 2, tagSmallInt, 1, tagOther, 0, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}, 1, true)
	f.Add([]byte{tagArray, 2, tagOther, 2, 1, tagSmallInt, 1}, 1, true) // int, not int64
	f.Fuzz(func(t *testing.T, data []byte, n int, match bool) {
		v := (&replyReader{b: data}).value(0)
		if arr, ok := v.([]any); ok && match {
			n = len(arr) - 1
		}
		res, remaining, err := decodeReserve(v, n)
		if err != nil {
			if res != nil || remaining != 0 {
				t.Fatalf("decodeReserve(%#v, %d) = %v, %d, %v: results with an error", v, n, res, remaining, err)
			}
			return
		}
		arr := v.([]any)
		if n < 1 || len(res) != n || len(arr) != n+1 {
			t.Fatalf("decodeReserve(%#v, %d) = %d results, want %d", v, n, len(res), n)
		}
		// A corrupt negative counter may be read back (everyone is turned away,
		// see TestDecodeReserve), but never alongside a use taken.
		if remaining < 0 && slices.Contains(res, Reserved) {
			t.Fatalf("decodeReserve(%#v, %d) = %v with remaining %d, want no RESERVED below zero", v, n, res, remaining)
		}
		if remaining != arr[0] {
			t.Fatalf("decodeReserve(%#v, %d) = remaining %d, want %v", v, n, remaining, arr[0])
		}
		notLoaded := 0
		for i, r := range res {
			if r < Reserved || r > TooSmall || strings.HasPrefix(r.String(), "Result(") {
				t.Fatalf("decodeReserve(%#v, %d)[%d] = %v, want a known result", v, n, i, r)
			}
			if int64(r) != arr[i+1] {
				t.Fatalf("decodeReserve(%#v, %d)[%d] = %d, want %v", v, n, i, r, arr[i+1])
			}
			if r == NotLoaded {
				notLoaded++
			}
		}
		if notLoaded != 0 && (notLoaded != n || remaining != 0) {
			t.Fatalf("decodeReserve(%#v, %d) = %v, %d: NOT_LOADED must be the whole batch with remaining 0", v, n, res, remaining)
		}
	})
}

// FuzzDecodeMeta: decodeMeta never panics; an accepted reply has 10 elements,
// limits in range and 0/1 flags; an empty one means not loaded.
func FuzzDecodeMeta(f *testing.F) {
	ok := []any{int64(10), "100000", "1000", "1000", "1", "1767225600000", "1798761600000", "1", "0", "0"}
	seeds := []any{
		ok,
		[]any{},
		[]any{int64(10), "100000", "1000", "1000", "1", "1767225600000", "1798761600000", "1", "1", "0"},
		[]any{int64(10), "100000", "1000", "1000", "1", "1767225600000", "1798761600000", "1", "0", "1"},
		[]any{int64(10), "100000", "1000", "1000", "1", "1767225600000", "1798761600000", "1", "0", "2"},
		[]any{int64(10), "100000", "1000", "1000", "1", "1767225600000", "1798761600000", "1", "0"},
		[]any{int64(10), "100000", "1000", "1000", "1", "1767225600000", "1798761600000", "1", "2", "0"},
		[]any{int64(10), "100000", "1000", "1000", "1", "1767225600000", "1798761600000", "1", nil, "0"},
		[]any{int64(10), "100000", "1000", "1000", "1", "0", "0", "0", "0", "0"},
		[]any{int64(10), "100000", "1000", "-1", "1", "0", "1", "0", "0", "0"},
		[]any{int64(10), "100000", "1000", "1000", "0", "0", "1", "0", "0", "0"},
		[]any{int64(10), "100000", "1000", "2147483648", "1", "0", "1", "0", "0", "0"},
		[]any{int64(10), "100000", "1000", "1000", "1", "0", "1", "2", "0", "0"},
		[]any{int64(10), "100000", "1000", "1000", "1", "9223372036854775807", "-9223372036854775808", "1", "0", "0"},
		[]any{int64(10), "1e3", "1000", "1000", "1", "0", "1", "0", "0", "0"},
		[]any{int64(10), nil, "1000", "1000", "1", "0", "1", "0", "0", "0"},
		[]any{"10", "100000", "1000", "1000", "1", "0", "1", "0", "0", "0"},
		[]any{int64(10), "100000"},
		nil,
		"x",
	}
	for _, s := range seeds {
		f.Add(encodeReply(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := (&replyReader{b: data}).value(0)
		m, remaining, loaded, err := decodeMeta(v)
		if err != nil || !loaded {
			if loaded || remaining != 0 || m != (voucher.Voucher{}) {
				t.Fatalf("decodeMeta(%#v) = %+v, %d, %v, %v: values with an error", v, m, remaining, loaded, err)
			}
			if err == nil {
				if arr, ok := v.([]any); !ok || len(arr) != 0 {
					t.Fatalf("decodeMeta(%#v) = not loaded, want only {} to mean not loaded", v)
				}
			}
			return
		}
		arr := v.([]any)
		if len(arr) != 10 || arr[0] != remaining {
			t.Fatalf("decodeMeta(%#v) = remaining %d from %d elements", v, remaining, len(arr))
		}
		if m.TotalLimit < 0 || m.TotalLimit > maxInt32 || m.PerUserLimit < 1 || m.PerUserLimit > maxInt32 {
			t.Fatalf("decodeMeta(%#v) = %+v, limits out of range", v, m)
		}
		want := []int64{m.DiscountAmount, m.MinOrderAmount, int64(m.TotalLimit), int64(m.PerUserLimit),
			msOf(m.StartsAt), msOf(m.EndsAt), b2i(m.FlashSale), b2i(m.Paused), b2i(m.RequireCheckoutToken)}
		for i, w := range want {
			if !numEqual(arr[i+1], w) {
				t.Fatalf("decodeMeta(%#v) field %d = %d, want %v", v, i+1, w, arr[i+1])
			}
		}
	})
}

// msOf is the inverse of fromMillis.
func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// numEqual reports whether s is a decimal spelling of n ("+5", "007").
func numEqual(s any, n int64) bool {
	str, ok := s.(string)
	if !ok {
		return false
	}
	got, err := strconv.ParseInt(str, 10, 64)
	return err == nil && got == n
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// FuzzDecodeState: decodeState never panics; an accepted reply gives one order
// per id/value pair, sorted by id, each read from its own pair, and the finished
// ids as sent, sorted.
func FuzzDecodeState(f *testing.F) {
	none := []any{}
	seeds := []any{
		[]any{},
		[]any{int64(5), int64(1767225600000), none, none},
		[]any{int64(3), int64(1767225600000), []any{"o2", "7:1767225600000", "o1", "8:1767225600001"}, []any{"o4", "o3"}},
		[]any{int64(3), int64(1767225600000), []any{"o1", "7"}, none},
		[]any{int64(3), int64(1767225600000), []any{"o1", "x:1"}, none},
		[]any{int64(3), int64(1767225600000), []any{"o1", "1:x"}, none},
		[]any{int64(3), int64(1767225600000), []any{"o1", "1:2:3"}, none},
		[]any{int64(3), int64(1767225600000), []any{"", ":"}, none},
		[]any{int64(3), int64(1767225600000), []any{"o1"}, none},
		[]any{int64(3), int64(1767225600000), none, []any{int64(1)}},
		[]any{int64(3), int64(1767225600000), none, "o1"},
		[]any{int64(3), int64(1767225600000), none},
		[]any{int64(3), int64(1767225600000), "o1", "7:1767225600000"}, // the reply before done
		[]any{int64(3), "1767225600000", none, none},
		[]any{int64(3), int64(1), int64(5), "1:1"},
		ints(1),
		nil,
	}
	for _, s := range seeds {
		f.Add(encodeReply(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := (&replyReader{b: data}).value(0)
		st, loaded, err := decodeState(v)
		if err != nil || !loaded {
			if loaded || st.Remaining != 0 || st.Orders != nil || st.Finished != nil || !st.Now.IsZero() {
				t.Fatalf("decodeState(%#v) = %+v, %v, %v: values with an error", v, st, loaded, err)
			}
			if err == nil {
				if arr, ok := v.([]any); !ok || len(arr) != 0 {
					t.Fatalf("decodeState(%#v) = not loaded, want only {} to mean not loaded", v)
				}
			}
			return
		}
		arr := v.([]any)
		if len(arr) != 4 || arr[0] != st.Remaining {
			t.Fatalf("decodeState(%#v) = %+v from %d elements", v, st, len(arr))
		}
		held, done := arr[2].([]any), arr[3].([]any)
		if len(st.Orders) != len(held)/2 || len(held)%2 != 0 {
			t.Fatalf("decodeState(%#v) = %d orders, want %d", v, len(st.Orders), len(held)/2)
		}
		if !slices.IsSortedFunc(st.Orders, func(a, b Order) int { return strings.Compare(a.OrderID, b.OrderID) }) {
			t.Fatalf("decodeState(%#v) orders not sorted: %+v", v, st.Orders)
		}
		pairs := map[string][]string{}
		for i := 0; i < len(held); i += 2 {
			pairs[held[i].(string)] = append(pairs[held[i].(string)], held[i+1].(string))
		}
		for _, o := range st.Orders {
			found := false
			for _, val := range pairs[o.OrderID] {
				cust, _, _ := strings.Cut(val, ":")
				found = found || numEqual(cust, o.CustomerID)
			}
			if !found {
				t.Fatalf("decodeState(%#v) invented order %+v", v, o)
			}
		}
		sent := make([]string, len(done))
		for i, e := range done {
			sent[i] = e.(string)
		}
		slices.Sort(sent)
		if !slices.Equal(sent, st.Finished) {
			t.Fatalf("decodeState(%#v) finished = %q, want %q", v, st.Finished, sent)
		}
	})
}

// FuzzDecodeReconcile: decodeReconcile never panics; an accepted reply is {0}
// (not loaded) or a header with after >= 0, restored >= 0 and termsChanged 0/1,
// and the released ids, sorted.
func FuzzDecodeReconcile(f *testing.F) {
	seeds := []any{
		ints(0),
		ints(0, 1),
		ints(1, 5, 4, 0, 0),
		ints(1, 5, 4, 0, 1),
		[]any{int64(1), int64(5), int64(6), int64(1), int64(0), "o2", "o1"},
		ints(1, 5, -1, 0, 0),
		ints(1, 5, 4, -2, 0),
		ints(1, 5, 4, 0, 2),
		ints(1, 5, 4, 0), // the reply before termsChanged
		[]any{int64(1), int64(5), int64(4), int64(0), "o1"}, // ditto, with a release
		[]any{int64(1), int64(5), int64(4), int64(0), int64(0), int64(9)},
		ints(2),
		[]any{"1", int64(5), int64(4), int64(0), int64(0)},
		[]any{},
		nil,
	}
	for _, s := range seeds {
		f.Add(encodeReply(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := (&replyReader{b: data}).value(0)
		res, err := decodeReconcile(v)
		if err != nil || !res.Loaded {
			if res.Loaded || res.RemainingBefore != 0 || res.RemainingAfter != 0 || res.Restored != 0 || res.TermsChanged || res.Released != nil {
				t.Fatalf("decodeReconcile(%#v) = %+v, %v: values with an error or when not loaded", v, res, err)
			}
			if err == nil {
				if arr, ok := v.([]any); !ok || len(arr) != 1 || arr[0] != int64(0) {
					t.Fatalf("decodeReconcile(%#v) = not loaded, want only {0} to mean not loaded", v)
				}
			}
			return
		}
		arr := v.([]any)
		if arr[0] != int64(1) || len(arr) < 5 || res.RemainingAfter < 0 || res.Restored < 0 {
			t.Fatalf("decodeReconcile(%#v) = %+v", v, res)
		}
		if arr[1] != res.RemainingBefore || arr[2] != res.RemainingAfter || arr[3] != int64(res.Restored) || arr[4] != b2i(res.TermsChanged) {
			t.Fatalf("decodeReconcile(%#v) = %+v, header not read as sent", v, res)
		}
		if len(res.Released) != len(arr)-5 || !slices.IsSorted(res.Released) {
			t.Fatalf("decodeReconcile(%#v) released = %q", v, res.Released)
		}
	})
}

// FuzzDecodeUpdate: decodeUpdate never panics; an accepted reply is {0} (not
// loaded) or {1, before, after} read as sent, with after >= 0.
func FuzzDecodeUpdate(f *testing.F) {
	seeds := []any{
		ints(0),
		ints(1, 0, 500),
		ints(1, 7, 0),
		ints(1, -3, 0),
		ints(1, 5, -1),
		ints(1, 5),
		ints(1, 5, 4, 0),
		ints(0, 1),
		ints(2, 5, 4),
		[]any{int64(1), "5", int64(4)},
		[]any{int64(1), int64(5), nil},
		[]any{},
		nil,
	}
	for _, s := range seeds {
		f.Add(encodeReply(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := (&replyReader{b: data}).value(0)
		res, err := decodeUpdate(v)
		if err != nil || !res.Loaded {
			if res != (UpdateResult{}) {
				t.Fatalf("decodeUpdate(%#v) = %+v, %v: values with an error or when not loaded", v, res, err)
			}
			if err == nil {
				if arr, ok := v.([]any); !ok || len(arr) != 1 || arr[0] != int64(0) {
					t.Fatalf("decodeUpdate(%#v) = not loaded, want only {0} to mean not loaded", v)
				}
			}
			return
		}
		arr := v.([]any)
		if len(arr) != 3 || arr[0] != int64(1) || arr[1] != res.RemainingBefore || arr[2] != res.RemainingAfter || res.RemainingAfter < 0 {
			t.Fatalf("decodeUpdate(%#v) = %+v, want the reply read as sent", v, res)
		}
	})
}
