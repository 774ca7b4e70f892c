package parse

import (
	"strings"
	"testing"
)

// TestDocWriteFailure: `doc_write_failure` in a doc or a _replicate body
// overrides the `[replicator]` default either way, stays out of the
// replication and job ids (the checkpoints are the same whatever a refused
// doc does), and a change of it is a change of the replication (Equal).
func TestDocWriteFailure(t *testing.T) {
	failing := DefaultOptions()
	failing.DocWriteFailure = DocWriteFailureFail
	tests := []struct {
		name  string
		extra string
		opts  Options
		fails bool
	}{
		{"CouchDB's default: count", "", DefaultOptions(), false},
		{"doc asks to fail", `"doc_write_failure":"fail"`, DefaultOptions(), true},
		{"[replicator] default fail", "", failing, true},
		{"doc counts despite a fail default", `"doc_write_failure":"count"`, failing, false},
	}
	plain, err := ReplicationDoc(doc(""), UserCtx{}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	bob := UserCtx{Name: "bob"}
	plainRequest, err := ReplicateRequest(doc(""), bob, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, request := range []bool{false, true} {
				var rep *Rep
				var err error
				if request {
					rep, err = ReplicateRequest(doc(tt.extra), bob, tt.opts)
				} else {
					rep, err = ReplicationDoc(doc(tt.extra), UserCtx{}, tt.opts)
				}
				if err != nil {
					t.Fatalf("request %v: %v", request, err)
				}
				if rep.FailsOnDocWriteFailure() != tt.fails {
					t.Errorf("request %v: fails %v, want %v (%q)", request, rep.FailsOnDocWriteFailure(), tt.fails, rep.DocWriteFailure)
				}
				if a, b := ReplicationID(rep, "uuid", ""), ReplicationID(plain, "uuid", ""); a != b {
					t.Errorf("request %v: replication id %s, without the option %s", request, a, b)
				}
				if a, b := TransientJobID(rep, "uuid"), TransientJobID(plainRequest, "uuid"); request && a != b {
					t.Errorf("job id %s, without the option %s", a, b)
				}
				if !request && rep.Equal(plain) == tt.fails {
					t.Errorf("Equal to the plain doc: %v, want %v", rep.Equal(plain), !tt.fails)
				}
				checkRoundTrip(t, rep)
			}
		})
	}
}

func TestDocWriteFailureConfig(t *testing.T) {
	tests := []struct {
		value, want, err string
	}{
		{"", "", ""},
		{"count", "", ""},
		{"fail", DocWriteFailureFail, ""},
		{"abort", "", "[replicator] `doc_write_failure` must be `count` or `fail`"},
	}
	for _, tt := range tests {
		o, err := OptionsFromConfig(map[string]string{"doc_write_failure": tt.value})
		if o.DocWriteFailure != tt.want {
			t.Errorf("%q: DocWriteFailure %q, want %q", tt.value, o.DocWriteFailure, tt.want)
		}
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%q: error %v, want %q", tt.value, err, tt.err)
		}
	}
}
