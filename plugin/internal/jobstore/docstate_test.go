package jobstore

import (
	"testing"
	"time"
)

func TestApplyDocState(t *testing.T) {
	now := time.Date(2026, 11, 21, 20, 8, 56, 0, time.UTC)
	stats := []byte(`{"docs_read":10,"start_time":"2026-11-21T20:08:53Z"}`)
	tests := []struct {
		name    string
		doc     string
		st      DocState
		want    string
		changed bool
	}{
		{"completed appended in order", `{"_id":"oneshot","_rev":"1-a","source":"s","target":"t","owner":"admin"}`,
			DocState{State: "completed", Stats: stats},
			`{"_id":"oneshot","_rev":"1-a","source":"s","target":"t","owner":"admin","_replication_state":"completed","_replication_state_time":"2026-11-21T20:08:56Z","_replication_stats":{"docs_read":10,"start_time":"2026-11-21T20:08:53Z"}}`, true},
		{"failed drops stats, keeps other fields", `{"_id":"d","x":{"y":[1,2]},"_replication_stats":{}}`,
			DocState{State: "failed", Reason: "bad `thing`"},
			`{"_id":"d","x":{"y":[1,2]},"_replication_state":"failed","_replication_state_time":"2026-11-21T20:08:56Z","_replication_state_reason":"bad ` + "`thing`" + `"}`, true},
		{"same state keeps its time", `{"_id":"d","_replication_state":"failed","_replication_state_time":"2020-01-01T00:00:00Z","_replication_state_reason":"old"}`,
			DocState{State: "failed", Reason: "new"},
			`{"_id":"d","_replication_state":"failed","_replication_state_time":"2020-01-01T00:00:00Z","_replication_state_reason":"new"}`, true},
		{"no change, no write", `{"_id":"d","_replication_state":"failed","_replication_state_time":"2020-01-01T00:00:00Z","_replication_state_reason":"r"}`,
			DocState{State: "failed", Reason: "r"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, changed, err := ApplyDocState([]byte(tt.doc), tt.st, now)
			if err != nil || changed != tt.changed || (changed && string(out) != tt.want) {
				t.Fatalf("got %s changed=%v err=%v\nwant %s", out, changed, err, tt.want)
			}
		})
	}
	if _, _, err := ApplyDocState([]byte(`[1]`), DocState{State: "failed"}, now); err == nil {
		t.Fatal("non-object doc accepted")
	}
}
