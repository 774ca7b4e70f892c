package replicate

import (
	"encoding/json"
	"testing"
)

func TestThroughTracker(t *testing.T) {
	type op struct {
		complete    int // index of batch to complete
		wantThrough string
		wantSource  string
	}
	cases := []struct {
		name    string
		batches int
		ops     []op
	}{
		{"in order", 3, []op{{0, `"s0"`, `"s0"`}, {1, `"s1"`, `"s1"`}, {2, `"s2"`, `"s2"`}}},
		{"gap holds checkpoint", 3, []op{{1, `0`, `"s1"`}, {2, `0`, `"s2"`}, {0, `"s2"`, `"s2"`}}},
		{"middle gap", 4, []op{{0, `"s0"`, `"s0"`}, {2, `"s0"`, `"s2"`}, {3, `"s0"`, `"s3"`}, {1, `"s3"`, `"s3"`}}},
		{"duplicate completion ignored", 2, []op{{1, `0`, `"s1"`}, {1, `0`, `"s1"`}, {0, `"s1"`, `"s1"`}}},
		{"reverse", 3, []op{{2, `0`, `"s2"`}, {1, `0`, `"s2"`}, {0, `"s2"`, `"s2"`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := newThroughTracker(json.RawMessage(`0`))
			ords := make([]uint64, tc.batches)
			for i := range ords {
				ords[i] = tr.add()
			}
			for i, o := range tc.ops {
				seq, _ := json.Marshal("s" + string(rune('0'+o.complete)))
				tr.complete(ords[o.complete], seq)
				through, source := tr.seqs()
				if string(through) != o.wantThrough || string(source) != o.wantSource {
					t.Fatalf("op %d: through %s source %s, want %s %s", i, through, source, o.wantThrough, o.wantSource)
				}
			}
		})
	}
}
