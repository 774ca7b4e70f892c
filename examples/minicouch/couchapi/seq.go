package couchapi

import (
	"encoding/json"
	"strconv"
	"strings"
)

// formatSeq renders a store sequence as CouchDB 3's opaque string form,
// "<N>-<suffix>"; the suffix is derived from the db uuid.
func formatSeq(seq uint64, dbUUID string) string {
	suffix := dbUUID
	if len(suffix) > 12 {
		suffix = suffix[:12]
	}
	return strconv.FormatUint(seq, 10) + "-g1" + suffix
}

// parseSince parses a `since` value: N, "N", "N-…", 0 or now. now yields
// (current, true). ok is false for anything else.
func parseSince(raw string, current uint64) (uint64, bool) {
	raw = strings.TrimSpace(raw)
	if raw == "" || raw == "0" {
		return 0, true
	}
	if raw == "now" {
		return current, true
	}
	if strings.HasPrefix(raw, `"`) {
		var s string
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return 0, false
		}
		if s == "now" {
			return current, true
		}
		raw = s
	}
	num, _, _ := strings.Cut(raw, "-")
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// sinceParam turns a decoded JSON since (number or string) into the string form.
func sinceParam(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	}
	return ""
}
