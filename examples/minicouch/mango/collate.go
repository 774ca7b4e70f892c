// Package mango is minicouch's Mango query engine: selectors compiled and
// matched against JSON documents (the `_selector` filter of `_changes`,
// `_find`, partial indexes), CouchDB's collation, json indexes kept in
// memory and brought up to date from the changes feed, and the `_find`
// planner (Plan: which index serves a query) and executor (Indexes.Find).
package mango

import (
	"sort"
	"strings"
	"unicode"
)

// typeRank orders JSON types as CouchDB's view collation does:
// null < false < true < numbers < strings < arrays < objects.
func typeRank(v any) int {
	switch x := v.(type) {
	case nil:
		return 0
	case bool:
		if x {
			return 2
		}
		return 1
	case float64:
		return 3
	case string:
		return 4
	case []any:
		return 5
	case map[string]any:
		return 6
	}
	return 7
}

// Compare orders two decoded JSON values (as produced by encoding/json into
// any) with CouchDB's collation: it returns -1, 0 or 1. Strings are compared
// case-insensitively first, then lower case before upper case, approximating
// ICU's default collation; objects compare by their sorted keys then values.
func Compare(a, b any) int { return compare(a, b, false) }

// compare is Compare, or CompareRaw when raw.
func compare(a, b any, raw bool) int {
	var ra, rb int
	if raw {
		ra, rb = rawRank(a), rawRank(b)
	} else {
		ra, rb = typeRank(a), typeRank(b)
	}
	if ra != rb {
		return cmpInt(ra, rb)
	}
	switch x := a.(type) {
	case float64:
		y := b.(float64)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	case string:
		return compareStrings(x, b.(string), raw)
	case []any:
		y := b.([]any)
		for i := 0; i < len(x) && i < len(y); i++ {
			if c := compare(x[i], y[i], raw); c != 0 {
				return c
			}
		}
		return cmpInt(len(x), len(y))
	case map[string]any:
		y := b.(map[string]any)
		kx, ky := sortedKeys(x), sortedKeys(y)
		for i := 0; i < len(kx) && i < len(ky); i++ {
			if c := compareStrings(kx[i], ky[i], raw); c != 0 {
				return c
			}
			if c := compare(x[kx[i]], y[ky[i]], raw); c != 0 {
				return c
			}
		}
		return cmpInt(len(kx), len(ky))
	}
	return 0
}

func compareStrings(a, b string, raw bool) int {
	if raw {
		return strings.Compare(a, b)
	}
	return CompareStrings(a, b)
}

// CompareStrings approximates ICU root collation: letters compare without
// regard to case first, then a lower-case letter sorts before its upper-case
// form, and finally raw code points break remaining ties.
func CompareStrings(a, b string) int {
	if a == b {
		return 0
	}
	la, lb := strings.ToLower(a), strings.ToLower(b)
	if la != lb {
		return strings.Compare(la, lb)
	}
	ra, rb := []rune(a), []rune(b)
	for i := 0; i < len(ra) && i < len(rb); i++ {
		if ra[i] != rb[i] {
			if unicode.IsLower(ra[i]) && !unicode.IsLower(rb[i]) {
				return -1
			}
			if !unicode.IsLower(ra[i]) && unicode.IsLower(rb[i]) {
				return 1
			}
			return cmpInt(int(ra[i]), int(rb[i]))
		}
	}
	return cmpInt(len(ra), len(rb))
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rawRank orders JSON types as Erlang orders the terms CouchDB decodes
// them to: numbers < atoms (false < null < true, by name) < objects
// (tuples) < arrays (lists) < strings (binaries).
func rawRank(v any) int {
	switch x := v.(type) {
	case float64:
		return 0
	case bool:
		if x {
			return 3
		}
		return 1
	case nil:
		return 2
	case map[string]any:
		return 4
	case []any:
		return 5
	case string:
		return 6
	}
	return 7
}

// CompareRaw orders two decoded JSON values as CouchDB compares _id
// values in a selector and the keys of _all_docs: by Erlang's term order
// rather than view collation. Strings compare byte by byte, arrays and
// objects member by member (objects by their sorted keys, as Compare).
func CompareRaw(a, b any) int { return compare(a, b, true) }
