package decode

import (
	"unicode/utf16"
	"unicode/utf8"

	"github.com/flashgate/flashgate/shared/voucher"
)

// jsonScanner is the one-pass JSON tokenizer the claim bodies are read with
// (claims.go): objects, strings, integers and literals, with the refusals
// encoding/json would give.
type jsonScanner struct {
	b []byte
	i int
}

func invalidJSON(format string, args ...any) error {
	return voucher.Errorf(voucher.CodeInvalidRequest, format, args...)
}

// body reads the whole body as one JSON object, whose members (if any) members
// reads, and nothing after it but white space.
func (s *jsonScanner) body(members func() error) error {
	s.space()
	if s.peek() != '{' {
		return invalidJSON("request body must be a JSON object")
	}
	if err := s.objectAt(members); err != nil {
		return err
	}
	s.space()
	if s.i != len(s.b) {
		return invalidJSON("request body has data after the JSON object")
	}
	return nil
}

// objectAt reads the object whose '{' s is at: members reads its members up to
// and including the closing brace, unless it is {}.
func (s *jsonScanner) objectAt(members func() error) error {
	s.i++
	s.space()
	if s.peek() == '}' {
		s.i++
		return nil
	}
	return members()
}

// object reads `"key": value` pairs up to and including the closing brace:
// key refuses a key (unknown, twice) before its value is looked at, value
// reads the value.
func (s *jsonScanner) object(key func([]byte) error, value func() error) error {
	for {
		s.space()
		if s.peek() != '"' {
			return s.malformed()
		}
		k, err := s.str()
		if err != nil {
			return err
		}
		if err := key(k); err != nil {
			return err
		}
		s.space()
		if s.peek() != ':' {
			return s.malformed()
		}
		s.i++
		s.space()
		if err := value(); err != nil {
			return err
		}
		s.space()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.malformed()
		}
	}
}

func (s *jsonScanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// space skips JSON's own whitespace (RFC 8259), nothing else.
func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScanner) malformed() error {
	if s.i >= len(s.b) {
		return invalidJSON("malformed JSON: unexpected end")
	}
	return invalidJSON("malformed JSON at byte %d", s.i+1)
}

// literal reads word (null, or what a wrong-typed value starts with).
func (s *jsonScanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		for j := 0; j < len(word) && s.i < len(s.b) && s.b[s.i] == word[j]; j++ {
			s.i++
		}
		return s.malformed()
	}
	s.i += len(word)
	return nil
}

// wrongType refuses a value of another JSON type than the field's.
func (s *jsonScanner) wrongType(field string) error {
	var kind string
	switch c := s.peek(); {
	case c == '"':
		kind = "string"
	case c == '{':
		kind = "object"
	case c == '[':
		kind = "array"
	case c == 't' || c == 'f':
		kind = "bool"
	case c == '-' || (c >= '0' && c <= '9'):
		kind = "number"
	default:
		return s.malformed()
	}
	return invalidJSON("%s: wrong type or out of range (got %s)", field, kind)
}

// integer reads a JSON number that must be an int64: another valid number
// (a fraction, an exponent, out of range) is the wrong type, anything else
// is malformed.
func (s *jsonScanner) integer(field string) (int64, error) {
	start := s.i
	neg := s.peek() == '-'
	if neg {
		s.i++
	}
	var u uint64
	overflow := false
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			d := uint64(s.b[s.i] - '0')
			if u > (1<<64-1-d)/10 {
				overflow = true
			} else {
				u = u*10 + d
			}
			s.i++
		}
	default:
		return 0, s.malformed()
	}
	fraction := false
	if s.peek() == '.' {
		fraction = true
		s.i++
		if !s.digits() {
			return 0, s.malformed()
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		fraction = true
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !s.digits() {
			return 0, s.malformed()
		}
	}
	limit := uint64(1<<63 - 1)
	if neg {
		limit++
	}
	if fraction || overflow || u > limit {
		return 0, invalidJSON("%s: wrong type or out of range (got number %s)", field, s.b[start:s.i])
	}
	if neg {
		return int64(-u), nil // -(1<<63) wraps to itself
	}
	return int64(u), nil
}

// digits reads one or more decimal digits.
func (s *jsonScanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// str reads a JSON string and returns its decoded bytes: a slice of the body,
// or a new buffer when it has escapes (rare: no client needs them for these
// fields). Invalid UTF-8 and lone surrogates become U+FFFD, as encoding/json
// does.
func (s *jsonScanner) str() ([]byte, error) {
	s.i++ // the opening quote
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if utf8.Valid(s.b[start : s.i-1]) {
				return s.b[start : s.i-1], nil
			}
			return []byte(string([]rune(string(s.b[start : s.i-1])))), nil
		case c == '\\':
			return s.escaped(append(make([]byte, 0, 2*(s.i-start)+16), s.b[start:s.i]...))
		case c < 0x20:
			return nil, s.malformed()
		}
		s.i++
	}
	return nil, s.malformed()
}

// escaped reads the rest of a string that has escapes, from the first one.
func (s *jsonScanner) escaped(out []byte) ([]byte, error) {
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !utf8.Valid(out) {
				out = []byte(string([]rune(string(out))))
			}
			return out, nil
		case c < 0x20:
			return nil, s.malformed()
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		s.i++
		switch e := s.peek(); e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := s.hex4(s.i + 1)
			if !ok {
				return nil, s.malformed()
			}
			s.i += 4
			if r >= 0xdc00 && r < 0xe000 {
				r = utf8.RuneError // a low surrogate without its high one
			} else if utf16.IsSurrogate(r) {
				if r2, ok := s.pair(); ok {
					r = utf16.DecodeRune(r, r2)
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, s.malformed()
		}
		s.i++
	}
	return nil, s.malformed()
}

// pair reads the \uXXXX low surrogate that follows a high one at s.i, if any.
func (s *jsonScanner) pair() (rune, bool) {
	if s.i+6 >= len(s.b) || s.b[s.i+1] != '\\' || s.b[s.i+2] != 'u' {
		return 0, false
	}
	r2, ok := s.hex4(s.i + 3)
	if !ok || utf16.DecodeRune(0xd800, r2) == utf8.RuneError {
		return 0, false
	}
	s.i += 6
	return r2, true
}

func (s *jsonScanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// printable makes an unknown key safe to quote in a message (valid UTF-8).
func printable(key []byte) string {
	if len(key) > 64 {
		key = key[:64]
	}
	return string([]rune(string(key)))
}
