package revtree

import (
	"strings"
	"testing"
)

// FuzzParseRev: a parsed rev has a positive generation that formats back
// to the digits given (no wrap, no sign), and its successor stays positive.
func FuzzParseRev(f *testing.F) {
	for _, s := range []string{"1-abc", "1-", "0-a", "-1-a", "9223372036854775807-a", "9223372036854775808-a",
		"9007199254740991-b", "18446744073709551617-x", "+1-a", "01-a", "1", "-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRev(s)
		if err != nil {
			return
		}
		if r.Gen <= 0 {
			t.Fatalf("ParseRev(%q) gen %d", s, r.Gen)
		}
		gen, _, _ := strings.Cut(s, "-")
		if got := strings.TrimLeft(strings.TrimPrefix(gen, "+"), "0"); got != strings.TrimSuffix(r.String(), "-"+r.Hash) {
			t.Fatalf("ParseRev(%q) = %s", s, r)
		}
		if r.Gen < MaxImportGen && r.Gen+1 <= 0 {
			t.Fatalf("successor of %q wraps", s)
		}
	})
}
