package jobdata

import (
	"testing"
	"time"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/seal"
)

// testKeys seals the records of these tests.
var testKeys = seal.NewKeyring(seal.RandomKey())

func TestStateOf(t *testing.T) {
	failed := NewFailed("db/_replicator", "u", "d", "bad doc", time.Unix(1, 0))
	tests := []struct {
		data string
		want string
		ok   bool
	}{
		{string(failed.Encode(testKeys, "j")), Failed, true},
		{string(New(nil, "", "", "", time.Unix(1, 0)).Encode(testKeys, "j")), Pending, true},
		{`{"rep":{"state":"x"},"job_history":[{"state":"y"}],"state":"running"}`, Running, true},
		{` { "state" : "cr\u0061shing" } `, Crashing, true},
		{`{"state":1}`, "", false},
		{`{"State":"running"}`, "", false},
		{`{}`, "", false},
		{`["state","running"]`, "", false},
		{`{"state":"runn`, "", false},
		{``, "", false},
	}
	for _, tt := range tests {
		got, ok := StateOf([]byte(tt.data))
		if got != tt.want || ok != tt.ok {
			t.Errorf("StateOf(%s) = %q, %v; want %q, %v", tt.data, got, ok, tt.want, tt.ok)
		}
	}
}

func TestFailure(t *testing.T) {
	tests := []struct {
		kind, info   string
		status       int
		name, reason string
	}{
		{"db_not_found", "db_not_found: could not open http://h/db/", 500, "db_not_found", "could not open http://h/db/"},
		{"", "Duplicate job running: x", 500, "error", "Duplicate job running: x"},
		{"", "Replication `a` specified by document `b`: x", 500, "error", "Replication `a` specified by document `b`: x"},
		{"", "db_not_found: looks typed but is not", 500, "error", "db_not_found: looks typed but is not"},
		{"max_backoff", "max_backoff: too many retries", 500, "max_backoff", "too many retries"},
		{"unauthorized", "unauthorized: unauthorized to access or create database http://h/db/", 401, "unauthorized", "unauthorized to access or create database http://h/db/"},
		{"forbidden", "forbidden: forbidden to access database http://h/db/", 403, "forbidden", "forbidden to access database http://h/db/"},
		{"filter_fetch_error", "filter_fetch_error: Couldn't open document `_design/f`", 404, "not_found", "Couldn't open document `_design/f`"},
	}
	for _, tt := range tests {
		r := &Record{ErrorKind: tt.kind, StateInfo: ErrorInfo(tt.info)}
		if status, name, reason := r.Failure(); status != tt.status || name != tt.name || reason != tt.reason {
			t.Errorf("Failure(%q, %q) = %d %q, %q; want %d %q, %q", tt.kind, tt.info, status, name, reason, tt.status, tt.name, tt.reason)
		}
	}
}

func TestSummarize(t *testing.T) {
	rep := &parse.Rep{Source: parse.Endpoint{URL: "http://h/a/"}, Target: parse.Endpoint{URL: "http://h/b/"}}
	running := New(rep, "x/_replicator", "u1", "d\"1", time.Unix(1, 0))
	running.RepID, running.State = "abc+continuous", Running
	transient := New(rep, "", "", "", time.Unix(1, 0))
	for _, rec := range []*Record{running, transient, NewFailed("_replicator", "u", "bad", "reason", time.Unix(1, 0))} {
		got, ok := Summarize(rec.Encode(testKeys, "j"))
		if !ok || got != rec.Summary() {
			t.Errorf("Summarize(%s) = %+v, %v; want %+v", rec.Encode(testKeys, "j"), got, ok, rec.Summary())
		}
	}
	// Only top-level members count.
	got, ok := Summarize([]byte(`{"rep":{"doc_id":"x","state":"failed"},"job_history":[{"rep_id":"y"}],"state":"running"}`))
	if !ok || got != (Summary{State: Running}) {
		t.Errorf("nested members read: %+v, %v", got, ok)
	}
	if _, ok := Summarize([]byte(`{"doc_id":"x"}`)); ok {
		t.Error("a record without a state summarized")
	}
}
