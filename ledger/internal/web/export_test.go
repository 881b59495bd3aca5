package web

import "testing"

// TestCSVCell: a cell a spreadsheet would read as a formula gets a leading ',
// any other is written as it is.
func TestCSVCell(t *testing.T) {
	for in, want := range map[string]string{
		"-1-1": "'-1-1", "-2.5E3": "'-2.5E3", "+1": "'+1", "@x": "'@x", "=1+1": "'=1+1",
		"\tx": "'\tx", "\rx": "'\rx",
		"": "", "order-1": "order-1", "1E9": "1E9", "a=1": "a=1", "'-1": "'-1", "42": "42",
	} {
		if got := csvCell(in); got != want {
			t.Errorf("csvCell(%q) = %q, want %q", in, got, want)
		}
	}
}
