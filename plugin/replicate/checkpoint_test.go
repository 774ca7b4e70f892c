package replicate

import (
	"encoding/json"
	"fmt"
	"testing"
)

func hist(entries ...string) []json.RawMessage {
	out := []json.RawMessage{}
	for _, e := range entries {
		// "sess:seq"
		var sess, seq string
		fmt.Sscanf(e, "%s", &sess)
		for i := range e {
			if e[i] == ':' {
				sess, seq = e[:i], e[i+1:]
			}
		}
		b, _ := json.Marshal(map[string]any{"session_id": sess, "recorded_seq": seq, "docs_read": len(seq)})
		out = append(out, b)
	}
	return out
}

func TestCompareCheckpoints(t *testing.T) {
	cases := []struct {
		name     string
		src, tgt *Checkpoint
		want     string // start seq JSON, "" = from scratch
	}{
		{"no docs", nil, nil, ""},
		{"only source", &Checkpoint{SessionID: "a", SourceLastSeq: json.RawMessage(`"5"`)}, nil, ""},
		{"same session", &Checkpoint{SessionID: "a", SourceLastSeq: json.RawMessage(`"9"`), History: hist("a:9")},
			&Checkpoint{SessionID: "a", SourceLastSeq: json.RawMessage(`"9"`), History: hist("a:9")}, `"9"`},
		{"source head found in target history", &Checkpoint{SessionID: "c", History: hist("c:30", "b:20", "a:10")},
			&Checkpoint{SessionID: "x", History: hist("x:99", "c:30", "a:10")}, `"30"`},
		{"target head found in rest of source history", &Checkpoint{SessionID: "c", History: hist("c:30", "b:20", "a:10")},
			&Checkpoint{SessionID: "b", History: hist("b:20", "a:10")}, `"20"`},
		{"heads dropped until common", &Checkpoint{SessionID: "c", History: hist("c:30", "y:25", "a:10")},
			&Checkpoint{SessionID: "x", History: hist("x:99", "z:50", "a:10")}, `"10"`},
		{"foreign histories", &Checkpoint{SessionID: "c", History: hist("c:30", "b:20")},
			&Checkpoint{SessionID: "x", History: hist("x:99", "y:50")}, ""},
		{"empty target history", &Checkpoint{SessionID: "c", History: hist("c:30")},
			&Checkpoint{SessionID: "x"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sp := compareCheckpoints(tc.src, tc.tgt)
			if string(sp.seq) != tc.want {
				t.Fatalf("start seq %s, want %q", sp.seq, tc.want)
			}
		})
	}
}

func TestCheckpointBodyHistoryCap(t *testing.T) {
	r := &run{sessionID: "s", startSeq: json.RawMessage(`0`)}
	r.rep = testRep(&testServer{Base: "http://127.0.0.1:1/"}, "a", "b")
	for i := 0; i < 60; i++ {
		r.history = append(r.history, json.RawMessage(fmt.Sprintf(`{"session_id":"old%d"}`, i)))
	}
	var cp Checkpoint
	if err := json.Unmarshal(r.checkpointBody(json.RawMessage(`"7"`), Stats{DocsWritten: 3}), &cp); err != nil {
		t.Fatal(err)
	}
	if len(cp.History) != maxHistory {
		t.Fatalf("history length %d, want %d", len(cp.History), maxHistory)
	}
	var head HistoryEntry
	json.Unmarshal(cp.History[0], &head)
	if head.SessionID != "s" || string(head.RecordedSeq) != `"7"` || head.DocsWritten != 3 || string(cp.SourceLastSeq) != `"7"` {
		t.Fatalf("head entry %+v", head)
	}
}
