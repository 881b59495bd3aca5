package httpxtest

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/flashgate/flashgate/shared/api"
	"github.com/flashgate/flashgate/shared/voucher"
)

// Nested is inner wrapped in depth opens and depth closes: a deep JSON value
// for the hostile tables.
func Nested(depth int, open, close, inner string) []byte {
	return []byte(strings.Repeat(open, depth) + inner + strings.Repeat(close, depth))
}

// chunked encodes b as one HTTP/1.1 chunk and the last chunk.
func chunked(b []byte) string {
	return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b)
}

// Claim is a reservation body with customer, order and amount spliced in as
// raw JSON, so that a case can send any literal in their place.
func Claim(customer, order, amount string) []byte {
	return []byte(fmt.Sprintf(`{"customerId":%s,"orderId":%s,"orderAmount":%s}`, customer, order, amount))
}

// PublicHostileCases are the cases for the routes both services serve: code is
// a standard voucher, flash a flash voucher, order an order of code held by
// customer 1, fresh a prefix for orderIds that must never be written.
func PublicHostileCases(code, flash, order, fresh string) []HostileCase {
	reserve := "/vouchers/" + code + "/reservations"
	flashReserve := "/vouchers/" + flash + "/reservations"
	get := reserve + "/" + order
	q := func(s string) string { return `"` + s + `"` }
	id := func(n int) string { return q(fmt.Sprintf("%s-%d", fresh, n)) }
	valid := func(n int) []byte { return Claim("7", id(n), "5000") }
	post := func(name string, body []byte, want string) HostileCase {
		return HostileCase{Name: name, Method: http.MethodPost, Path: reserve, Body: body, Status: http.StatusBadRequest, Code: want}
	}
	invalid := voucher.CodeInvalidRequest
	big := append(valid(1)[:len(valid(1))-1], []byte(`,"pad":"`+strings.Repeat("x", 17<<10)+`"}`)...)
	spaced := append(bytes.Repeat([]byte(" "), 17<<10), valid(2)...)

	return []HostileCase{
		// Sizes and depth.
		post("body of 17 KiB", big, invalid),
		post("17 KiB of whitespace before a valid body", spaced, invalid),
		post("body of 10 MiB", append(valid(3), bytes.Repeat([]byte(" "), 10<<20)...), invalid),
		post("10000 nested arrays", Nested(10000, "[", "]", ""), invalid),
		post("10000 nested objects", Nested(10000, `{"a":`, "}", "1"), invalid),
		post("10000 nested arrays as customerId", []byte(`{"customerId":`+string(Nested(10000, "[", "]", "1"))+`,"orderId":"x","orderAmount":1}`), invalid),
		// Numbers.
		post("customerId 1e400", Claim("1e400", id(4), "5000"), invalid),
		post("customerId 2^63", Claim("9223372036854775808", id(5), "5000"), invalid),
		post("customerId -2^63-1", Claim("-9223372036854775809", id(6), "5000"), invalid),
		post("customerId -0", Claim("-0", id(7), "5000"), invalid),
		post("customerId 0", Claim("0", id(8), "5000"), invalid),
		post("customerId 1e2 as an int", Claim("1e2", id(9), "5000"), invalid),
		post("customerId 1.0", Claim("1.0", id(10), "5000"), invalid),
		post("customerId as a string", Claim(`"7"`, id(11), "5000"), invalid),
		post("customerId true", Claim("true", id(12), "5000"), invalid),
		post("orderAmount above MaxAmount", Claim("7", id(13), "1125899906842625"), invalid),
		post("orderAmount negative", Claim("7", id(14), "-1"), invalid),
		post("orderAmount 1e400", Claim("7", id(15), "1e400"), invalid),
		post("orderAmount NaN", Claim("7", id(16), "NaN"), invalid),
		post("orderAmount Infinity", Claim("7", id(17), "Infinity"), invalid),
		post("orderAmount -Infinity", Claim("7", id(18), "-Infinity"), invalid),
		post("orderAmount hex", Claim("7", id(19), "0x10"), invalid),
		post("orderAmount with a leading zero", Claim("7", id(20), "05000"), invalid),
		// Keys.
		post("duplicate customerId", []byte(`{"customerId":7,"customerId":8,"orderId":`+id(21)+`,"orderAmount":5000}`), invalid),
		post("duplicate orderId, the first one invalid", []byte(`{"customerId":7,"orderId":"../x","orderId":`+id(22)+`,"orderAmount":5000}`), invalid),
		post("key in another case", []byte(`{"CustomerID":7,"orderId":`+id(23)+`,"orderAmount":5000}`), invalid),
		post("unknown field", []byte(`{"customerId":7,"orderId":`+id(24)+`,"orderAmount":5000,"discountAmount":1}`), invalid),
		post("missing customerId", []byte(`{"orderId":`+id(25)+`,"orderAmount":5000}`), invalid),
		post("null customerId", Claim("null", id(26), "5000"), invalid),
		post("__proto__ key", []byte(`{"__proto__":{"customerId":7},"orderId":`+id(27)+`,"orderAmount":5000}`), invalid),
		// Encodings and literals.
		post("UTF-8 BOM", append([]byte("\xef\xbb\xbf"), valid(28)...), invalid),
		post("no-break space before the object", append([]byte("\u00a0"), valid(29)...), invalid),
		post("NUL byte before the object", append([]byte{0}, valid(30)...), invalid),
		post("NUL byte inside a string", Claim("7", "\"a\x00b\"", "5000"), invalid),
		post("escaped NUL in orderId", Claim("7", `"a\u0000b"`, "5000"), invalid),
		post("invalid UTF-8 in orderId", Claim("7", "\"\xff\xfe\"", "5000"), invalid),
		post("invalid UTF-8 in a key", []byte("{\"customerId\xff\":7,\"orderId\":"+id(31)+",\"orderAmount\":5000}"), invalid),
		post("UTF-16 body", []byte("\xff\xfe{\x00}\x00"), invalid),
		post("single quotes", []byte(`{'customerId':7,'orderId':'x','orderAmount':5000}`), invalid),
		post("comments", []byte(`{"customerId":7,/* hi */"orderId":`+id(32)+`,"orderAmount":5000}`), invalid),
		post("trailing comma", []byte(`{"customerId":7,"orderId":`+id(33)+`,"orderAmount":5000,}`), invalid),
		post("two objects", append(valid(34), valid(35)...), invalid),
		post("trailing garbage", append(valid(36), []byte(" x")...), invalid),
		post("truncated", valid(37)[:20], invalid),
		post("array instead of an object", append(append([]byte("["), valid(38)...), ']'), invalid),
		post("string instead of an object", []byte(`"{\"customerId\":7}"`), invalid),
		post("number instead of an object", []byte(`42`), invalid),
		post("null instead of an object", []byte(`null`), invalid),
		post("empty body", []byte{}, invalid),
		// OrderIds in the body.
		post("orderId with braces", Claim("7", `"{x}"`, "5000"), invalid),
		post("orderId with a space", Claim("7", `"a b"`, "5000"), invalid),
		post("orderId with %00", Claim("7", `"a%00"`, "5000"), invalid),
		post("orderId with a slash", Claim("7", `"../../admin"`, "5000"), invalid),
		post("orderId with unicode", Claim("7", `"ordér-1"`, "5000"), invalid),
		post("orderId of 65 bytes", Claim("7", q(strings.Repeat("x", 65)), "5000"), invalid),
		post("orderId empty", Claim("7", `""`, "5000"), invalid),
		// Content types.
		{Name: "text/plain", Method: http.MethodPost, Path: reserve, Body: valid(39), ContentType: "text/plain", Status: 400, Code: invalid},
		{Name: "form", Method: http.MethodPost, Path: reserve, Body: []byte("customerId=7&orderId=x&orderAmount=5000"),
			ContentType: "application/x-www-form-urlencoded", Status: 400, Code: invalid},
		{Name: "multipart", Method: http.MethodPost, Path: reserve, Body: []byte("--b\r\n\r\n{}\r\n--b--\r\n"),
			ContentType: "multipart/form-data; boundary=b", Status: 400, Code: invalid},
		{Name: "json with a suffix", Method: http.MethodPost, Path: reserve, Body: valid(40), ContentType: "application/json-patch+json", Status: 400, Code: invalid},
		// The flash voucher: refused before Redis is asked.
		{Name: "flash: 17 KiB body", Method: http.MethodPost, Path: flashReserve, Body: big, Status: 400, Code: invalid},
		{Name: "flash: customerId 2^63", Method: http.MethodPost, Path: flashReserve, Body: Claim("9223372036854775808", id(41), "5000"), Status: 400, Code: invalid},
		{Name: "flash: orderId with braces", Method: http.MethodPost, Path: flashReserve, Body: Claim("7", `"{x}"`, "5000"), Status: 400, Code: invalid},
		// Codes and orderIds in the path.
		{Name: "code with braces", Method: http.MethodPost, Path: "/vouchers/%7B" + code + "%7D/reservations", Body: valid(42), Status: 400, Code: invalid},
		{Name: "code with a colon", Method: http.MethodPost, Path: "/vouchers/" + code + "%3Aremaining/reservations", Body: valid(43), Status: 400, Code: invalid},
		{Name: "code with %00", Method: http.MethodPost, Path: "/vouchers/" + code + "%00/reservations", Body: valid(44), Status: 400, Code: invalid},
		{Name: "code with unicode", Method: http.MethodPost, Path: "/vouchers/caf%C3%A9/reservations", Body: valid(45), Status: 400, Code: invalid},
		{Name: "code with invalid UTF-8", Method: http.MethodPost, Path: "/vouchers/%FF%FE/reservations", Body: valid(46), Status: 400, Code: invalid},
		{Name: "code with a space", Method: http.MethodPost, Path: "/vouchers/a%20b/reservations", Body: valid(47), Status: 400, Code: invalid},
		{Name: "code of 33 bytes", Method: http.MethodPost, Path: "/vouchers/" + strings.Repeat("A", 33) + "/reservations", Body: valid(48), Status: 400, Code: invalid},
		{Name: "code of 8 KiB", Method: http.MethodGet, Path: "/vouchers/" + strings.Repeat("A", 8<<10) + "/reservations/x", Status: 400, Code: invalid},
		{Name: "code with a newline", Method: http.MethodGet, Path: "/vouchers/a%0Ab/reservations/x", Status: 400, Code: invalid},
		{Name: "orderId with braces", Method: http.MethodGet, Path: reserve + "/%7Bx%7D", Status: 400, Code: invalid},
		{Name: "orderId with %00", Method: http.MethodPost, Path: reserve + "/a%00b/confirm", Status: 400, Code: invalid},
		{Name: "orderId with unicode", Method: http.MethodDelete, Path: reserve + "/ord%C3%A9r", Status: 400, Code: invalid},
		{Name: "orderId of 65 bytes", Method: http.MethodGet, Path: reserve + "/" + strings.Repeat("x", 65), Status: 400, Code: invalid},
		{Name: "orderId with a space", Method: http.MethodDelete, Path: reserve + "/a%20b", Status: 400, Code: invalid},
		{Name: "orderId with a question mark", Method: http.MethodGet, Path: reserve + "/a%3Fb", Status: 400, Code: invalid},
		// Path tricks.
		{Name: "dot-dot to the admin routes", Method: http.MethodGet, Path: "/vouchers/../admin/vouchers/" + code, Status: 404, Code: voucher.CodeNotFound},
		{Name: "dot-dot after the orderId", Method: http.MethodDelete, Path: get + "/../../../../admin/vouchers/" + code, Status: 404, Code: voucher.CodeNotFound},
		{Name: "encoded dot-dot and slash", Method: http.MethodGet, Path: reserve + "/..%2F..%2Fadmin", Status: 404, Code: voucher.CodeNotFound},
		{Name: "double slash in front", Method: http.MethodPost, Path: "/" + reserve, Body: valid(49), Status: 404, Code: voucher.CodeNotFound},
		{Name: "double slash inside", Method: http.MethodGet, Path: "/vouchers/" + code + "//reservations/" + order},
		{Name: "empty code", Method: http.MethodPost, Path: "/vouchers//reservations", Body: valid(50), Status: 400, Code: invalid},
		{Name: "encoded slash in the code", Method: http.MethodPost, Path: "/vouchers/a%2Fb/reservations", Body: valid(51), Status: 404, Code: voucher.CodeNotFound},
		{Name: "backslash", Method: http.MethodGet, Path: "/vouchers%5C" + code + "%5Creservations%5C" + order, Status: 404, Code: voucher.CodeNotFound},
		{Name: "trailing slash on reserve", Method: http.MethodPost, Path: reserve + "/", Body: valid(52)},
		{Name: "trailing slash on get", Method: http.MethodGet, Path: get + "/"},
		{Name: "unknown route", Method: http.MethodGet, Path: "/vouchers/" + code, Status: 404, Code: voucher.CodeNotFound},
		{Name: "root", Method: http.MethodGet, Path: "/", Status: 404, Code: voucher.CodeNotFound},
		{Name: "query string smuggling a body", Method: http.MethodPost, Path: reserve + "?customerId=7&orderId=x&orderAmount=5000", Status: 400, Code: invalid},
		// Methods.
		{Name: "PUT reserve", Method: http.MethodPut, Path: reserve, Body: valid(53), Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "PATCH reservation", Method: http.MethodPatch, Path: get, Body: []byte(`{"status":"CONFIRMED"}`), Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "GET reserve", Method: http.MethodGet, Path: reserve, Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "POST reservation", Method: http.MethodPost, Path: get, Body: valid(54), Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "GET confirm", Method: http.MethodGet, Path: get + "/confirm", Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "OPTIONS", Method: http.MethodOptions, Path: reserve, Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "TRACE", Method: http.MethodTrace, Path: get, Status: 405, Code: voucher.CodeMethodNotAllowed},
		{Name: "made-up method", Method: "RESERVE", Path: reserve, Body: valid(55), Status: 405, Code: voucher.CodeMethodNotAllowed},
		// Headers.
		{Name: "header of 20 KiB", Method: http.MethodPost, Path: reserve, Body: []byte("[]"),
			Headers: map[string]string{"X-Padding": strings.Repeat("a", 20<<10)}, Status: 400, Code: invalid},
		{Name: "request id of 10 KiB", Method: http.MethodPost, Path: reserve, Body: []byte("[]"),
			Headers: map[string]string{api.HeaderRequestID: strings.Repeat("r", 10<<10)}, Status: 400, Code: invalid},
		{Name: "headers over 32 KiB", Method: http.MethodPost, Path: reserve, Body: valid(56),
			Headers: map[string]string{"X-Padding": strings.Repeat("a", 40<<10)}, Status: 431, NetHTTP: true},
		{Name: "NUL in a header value", Raw: "GET " + get + " HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nX-A: a\x00b\r\n\r\n", Status: 400, NetHTTP: true},
		{Name: "invalid UTF-8 in the request line", Raw: "GET /vouchers/\xff\xfe/reservations/x HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n\r\n", Status: 400},
		{Name: "bare LF line endings", Raw: "POST " + reserve + " HTTP/1.1\nHost: x\n{AUTH}\nContent-Length: 2\n\n[]", Status: 400, Code: invalid},
		{Name: "Content-Length and chunked", Raw: "POST " + reserve + " HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nContent-Length: 60\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + string(valid(57)), Status: 400},
		{Name: "chunked body of 10 MiB", Raw: "POST " + reserve + " HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n" + chunked(append(valid(58), bytes.Repeat([]byte(" "), 10<<20)...)), Status: 400, Code: invalid},
	}
}
