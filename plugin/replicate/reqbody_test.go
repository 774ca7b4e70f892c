package replicate

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestBulkGetBodyMatchesEncodingJSON checks that the hand-built _bulk_get
// body is byte for byte what json.Marshal made of the same request.
func TestBulkGetBodyMatchesEncodingJSON(t *testing.T) {
	type req struct {
		ID        string   `json:"id"`
		Rev       string   `json:"rev"`
		AttsSince []string `json:"atts_since,omitempty"`
	}
	tests := []struct {
		name string
		revs []missingRev
	}{
		{"empty", nil},
		{"one", []missingRev{{id: "d0000001", rev: "1-abc"}}},
		{"possible ancestors", []missingRev{{id: "a", rev: "3-c", pas: []string{"2-b", "1-a"}}, {id: "b", rev: "1-x"}}},
		{"quote and backslash", []missingRev{{id: `say "hi" \o/`, rev: "1-a"}}},
		{"html escapes", []missingRev{{id: "<b>&amp;</b>", rev: "1-a"}}},
		{"control characters", []missingRev{{id: "tab\there\nnl\x00\x1f\x7f", rev: "1-a"}}},
		{"unicode", []missingRev{{id: "é日本\u2028\u2029😀", rev: "1-a"}}},
		{"invalid utf-8", []missingRev{{id: "bad\xff\xfe", rev: "1-\xc3"}}},
		{"design and local", []missingRev{{id: "_design/x", rev: "2-b", pas: []string{"1-a"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs := make([]req, len(tc.revs))
			for i, m := range tc.revs {
				reqs[i] = req{ID: m.id, Rev: m.rev, AttsSince: m.pas}
			}
			want, _ := json.Marshal(map[string]any{"docs": reqs, "latest": true, "revs": true, "attachments": false})
			if got := bulkGetBody(tc.revs); string(got) != string(want) {
				t.Errorf("bulkGetBody:\n got %s\nwant %s", got, want)
			}
			want, _ = json.Marshal(map[string]any{"docs": reqs, "latest": true, "revs": true, "attachments": true})
			if got := bulkGetBodyAtts(tc.revs, true); string(got) != string(want) {
				t.Errorf("bulkGetBodyAtts(true):\n got %s\nwant %s", got, want)
			}
		})
	}
}

// BenchmarkBulkGetBody encodes the _bulk_get request of a 500-doc batch
// with encoding/json (as before) and with bulkGetBody; ns/doc is per
// requested doc.
func BenchmarkBulkGetBody(b *testing.B) {
	revs := make([]missingRev, 500)
	for i := range revs {
		revs[i] = missingRev{id: fmt.Sprintf("d%07d", i), rev: fmt.Sprintf("1-%032x", i)}
	}
	type req struct {
		ID        string   `json:"id"`
		Rev       string   `json:"rev"`
		AttsSince []string `json:"atts_since,omitempty"`
	}
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			reqs := make([]req, len(revs))
			for i, m := range revs {
				reqs[i] = req{ID: m.id, Rev: m.rev, AttsSince: m.pas}
			}
			json.Marshal(map[string]any{"docs": reqs, "latest": true, "revs": true, "attachments": false})
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(revs)), "ns/doc")
	})
	b.Run("appends", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			bulkGetBody(revs)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(revs)), "ns/doc")
	})
}
