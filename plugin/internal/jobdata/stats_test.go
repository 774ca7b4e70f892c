package jobdata

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
)

// TestStatsFailuresStored: a job's refused docs and their counts by kind
// are stored in the record under their documented names and read back
// whole; a record without them (older, or no refusal) has none.
func TestStatsFailuresStored(t *testing.T) {
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://h/a/"}, Target: parse.Endpoint{URL: "http://h/b/"}}
	rec := New(rep, "_replicator", "u1", "d", time.Unix(1, 0))
	rec.Stats.DocWriteFailures = 2
	rec.Stats.DocWriteFailuresByReason = map[string]int64{"forbidden": 1, "id_too_long": 1}
	rec.Stats.FailedDocs = []FailedDoc{
		{ID: "b", Rev: "1-b", Status: 403, Error: "forbidden", Reason: "no", Time: 7},
		{ID: "long...", Error: "id_too_long", Reason: "too long", Time: 6},
	}
	data := rec.Encode(testKeys, "j")
	for _, want := range []string{
		`"doc_write_failures_by_reason":{"forbidden":1,"id_too_long":1}`,
		`"failed_docs":[{"id":"b","rev":"1-b","status":403,"error":"forbidden","reason":"no","time":7},{"id":"long...","error":"id_too_long","reason":"too long","time":6}]`,
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("record %s lacks %s", data, want)
		}
	}
	back, err := Decode(data, testKeys, "j")
	if err != nil || !reflect.DeepEqual(back.Stats.DocWriteFailuresByReason, rec.Stats.DocWriteFailuresByReason) ||
		!reflect.DeepEqual(back.Stats.FailedDocs, rec.Stats.FailedDocs) {
		t.Fatalf("decoded %+v, %v; want %+v", back.Stats, err, rec.Stats)
	}
	rec.Stats = Stats{}
	if data := rec.Encode(testKeys, "j"); strings.Contains(string(data), "failed_docs") || strings.Contains(string(data), "by_reason") {
		t.Errorf("a record without refusals stores their keys: %s", data)
	}
}
