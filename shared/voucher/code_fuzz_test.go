package voucher_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/flashgate/flashgate/shared/gate"
	"github.com/flashgate/flashgate/shared/voucher"
)

var codeSeeds = []string{
	"FLASH100", "a", "A-b_9", "01234567890123456789012345678901", "012345678901234567890123456789012",
	"", "{x}", "x}", "{", "a:b", "a b", "a\tb", "a\n", "\na", "a\x00", "%00", "café", "ＡＢＣ", "a\u00a0",
	"voucher:{x}:remaining", "../x", "a/b", "a.b", "*", "a\r", "\xff", "x}:{y",
}

// FuzzValidCode checks that every code ValidCode accepts is safe as part of a
// Redis key: its four keys carry exactly one hash tag, the same one, and no
// brace, colon, space or other byte outside [A-Za-z0-9_-] ever passes.
func FuzzValidCode(f *testing.F) {
	for _, s := range codeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		ok := voucher.ValidCode(code)
		if want := codeByRule(code); ok != want {
			t.Fatalf("ValidCode(%q) = %v, want %v", code, ok, want)
		}
		if !ok {
			return
		}
		if strings.ContainsAny(code, "{}: \t\r\n\v\f\x00") || strings.ContainsFunc(code, unicode.IsSpace) {
			t.Fatalf("ValidCode(%q) = true for a code with a brace, colon or space", code)
		}
		keys := gate.Keys(code)
		if len(keys) != 5 {
			t.Fatalf("Keys(%q) = %d keys, want 5", code, len(keys))
		}
		tag := "{" + code + "}"
		suffixes := []string{"remaining", "users", "orders", "meta", "done"}
		for i, k := range keys {
			if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Fatalf("Keys(%q)[%d] = %q, want exactly one '{' and one '}'", code, i, k)
			}
			if got := hashTag(k); got != code {
				t.Fatalf("Keys(%q)[%d] = %q has hash tag %q, want %q", code, i, k, got, code)
			}
			if want := "voucher:" + tag + ":" + suffixes[i]; k != want {
				t.Fatalf("Keys(%q)[%d] = %q, want %q", code, i, k, want)
			}
			// Only the two separators around the tag: a code cannot spell
			// another voucher's key.
			if strings.Count(k, ":") != 2 {
				t.Fatalf("Keys(%q)[%d] = %q, want exactly two ':'", code, i, k)
			}
		}
	})
}

// codeByRule is ^[A-Za-z0-9_-]{1,32}$ byte by byte.
func codeByRule(s string) bool {
	if len(s) < 1 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !alnum(s[i]) && s[i] != '_' && s[i] != '-' {
			return false
		}
	}
	return true
}

// hashTag is the part of key Redis Cluster hashes: between the first '{' and
// the first '}' after it, when that is not empty.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

var orderIDSeeds = []string{
	"order-1001", "a", "A.b:c_d-9", "..", ".", ":", strings.Repeat("x", 64), strings.Repeat("x", 65),
	"", "a b", "a/b", "a%2Fb", "a\x00", "a\n", "é", "{x}", "a?b", "a#b", "\xff",
}

// FuzzValidOrderID checks ValidOrderID against ^[A-Za-z0-9_.:-]{1,64}$ byte by
// byte, less the ids made only of dots: orderIds travel in URL paths (where
// "." and ".." are path segments clients normalise away) and Redis hash fields.
func FuzzValidOrderID(f *testing.F) {
	for _, s := range orderIDSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		want := len(id) >= 1 && len(id) <= 64
		for i := 0; i < len(id) && want; i++ {
			c := id[i]
			want = alnum(c) || strings.IndexByte("_.:-", c) >= 0
		}
		if strings.Trim(id, ".") == "" {
			want = false
		}
		if got := voucher.ValidOrderID(id); got != want {
			t.Fatalf("ValidOrderID(%q) = %v, want %v", id, got, want)
		}
	})
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
