package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/couchepi/couchepi/examples/minicouch/minicouchtest"
)

// TestSIGTERMCheckpointsReplication stops minicouch with SIGTERM while the
// replicator plugin runs a continuous replication between two of its dbs.
// The plugins stop first, so the job's final checkpoint reaches the
// server over HTTP: minicouch exits 0 within 5 s and, after a restart, the
// source's checkpoint records the last replicated sequence (the periodic
// checkpoint is set to 10 minutes, so only the shutdown can have written
// it). It also checks that _active_tasks passes the plugin's entries
// through without HTML escaping.
func TestSIGTERMCheckpointsReplication(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the replicator plugin")
	}
	srv := minicouchtest.Start(t, minicouchtest.Options{
		Plugins: []string{minicouchtest.Replicator(t, "")},
		Config:  "[chttpd_auth]\niterations = 1000\n[replicator]\ncheckpoint_interval = 600000\n",
	})
	mustDo := func(method, path string, body any, want int) []byte {
		t.Helper()
		st, b, err := srv.Do(method, path, body)
		if err != nil || st != want {
			t.Fatalf("%s %s: %d %s %v (want %d)", method, path, st, b, err, want)
		}
		return b
	}
	mustDo("PUT", "/src", nil, 201)
	mustDo("PUT", "/tgt", nil, 201)
	for i := range 20 {
		mustDo("PUT", fmt.Sprintf("/src/d%02d", i), `{"v":"<&>"}`, 201)
	}
	mustDo("PUT", "/_replicator/live", map[string]any{
		"source": srv.AdminURL + "src", "target": srv.AdminURL + "tgt", "continuous": true,
	}, 201)
	waitDocs := func(n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			var info struct {
				DocCount int `json:"doc_count"`
			}
			srv.JSON(t, "GET", "/tgt", nil, &info)
			if info.DocCount == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("target has %d docs, want %d\n%s", info.DocCount, n, srv.Log())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitDocs(20)
	mustDo("PUT", "/src/last", `{"v":1}`, 201)
	waitDocs(21)

	tasks := mustDo("GET", "/_active_tasks", nil, 200)
	if !bytes.Contains(tasks, []byte(`"type":"replication"`)) || bytes.Contains(tasks, []byte(`\u003c`)) {
		t.Errorf("_active_tasks = %s", tasks)
	}

	var info struct {
		UpdateSeq string `json:"update_seq"`
	}
	srv.JSON(t, "GET", "/src", nil, &info)
	start := time.Now()
	if err := srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, ok := srv.Wait(20 * time.Second)
	took := time.Since(start)
	if !ok {
		t.Fatalf("minicouch did not exit after SIGTERM\n%s", srv.Log())
	}
	if !st.Success() {
		t.Fatalf("exit status %v\n%s", st, srv.Log())
	}
	if took > 5*time.Second {
		t.Errorf("shutdown took %v, want < 5s\n%s", took, srv.Log())
	}
	t.Logf("SIGTERM to exit: %v", took)

	srv.Restart(t)
	var locals struct {
		Rows []struct {
			ID string `json:"id"`
		} `json:"rows"`
	}
	srv.JSON(t, "GET", "/src/_local_docs", nil, &locals)
	var checkpoint struct {
		SourceLastSeq any `json:"source_last_seq"`
	}
	for _, r := range locals.Rows {
		srv.JSON(t, "GET", "/src/"+r.ID, nil, &checkpoint)
	}
	if got, want := seqNumber(checkpoint.SourceLastSeq), seqNumber(info.UpdateSeq); got != want || want == 0 {
		t.Errorf("checkpoint source_last_seq %v (of %d _local docs), want the source's update_seq %s", checkpoint.SourceLastSeq, len(locals.Rows), info.UpdateSeq)
	}
}

// seqNumber is the numeric prefix of a CouchDB sequence ("21-g1AA…" → 21).
func seqNumber(seq any) int {
	s := fmt.Sprint(seq)
	n, _ := strconv.Atoi(strings.SplitN(s, "-", 2)[0])
	return n
}
