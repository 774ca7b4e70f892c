package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/replicate"
	"github.com/hashicorp/go-hclog"
)

// syncBuffer is a bytes.Buffer safe to read while run writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runCLI runs couchrep in-process without a terminal and returns exit code, stdout, stderr.
func runCLI(t *testing.T, sig chan os.Signal, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr syncBuffer
	if sig == nil {
		sig = make(chan os.Signal)
	}
	t.Setenv("COUCHREP_HOME", t.TempDir())
	code := run(args, strings.NewReader(""), &stdout, &stderr, sig, false, func() int { return 80 })
	return code, stdout.String(), stderr.String()
}

func TestExitCodes(t *testing.T) {
	s := startServer(t)
	s.seed(t, "src", 10)
	tests := []struct {
		name     string
		args     []string
		code     int
		stderr   string // substring
		noSecret bool
	}{
		{name: "missing source", args: []string{s.base + "missing", s.base + "tgt"}, code: exitFailed,
			stderr: "couchrep: db_not_found: could not open " + s.plain + "missing/", noSecret: true},
		{name: "missing target without create_target", args: []string{s.base + "src", s.base + "nosuchtarget"}, code: exitFailed,
			stderr: "db_not_found: could not open " + s.plain + "nosuchtarget/", noSecret: true},
		{name: "usage", args: []string{s.base + "src"}, code: exitUsage, stderr: "need SOURCE and TARGET"},
		{name: "invalid option", args: []string{"--worker-batch-size", "-1", s.base + "src", s.base + "tgt"}, code: exitUsage,
			stderr: "worker_batch_size"},
		{name: "help", args: []string{"--help"}, code: exitDone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, nil, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr %q lacks %q", stderr, tc.stderr)
			}
			if tc.noSecret && s.pass != "" && strings.Contains(stdout+stderr, ":"+s.pass+"@") {
				t.Errorf("password printed:\n%s%s", stdout, stderr)
			}
		})
	}
}

func TestOneShotLogOutput(t *testing.T) {
	s := startServer(t)
	s.seed(t, "src", 300)
	const uuid = "0123456789abcdef0123456789abcdef" // one replication id for both runs
	code, stdout, stderr := runCLI(t, nil, "--server-uuid", uuid, "--create-target", "--log-interval", "200ms", s.base+"src", s.base+"tgt")
	if code != exitDone {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if n := s.docCount(t, "tgt"); n != 300 {
		t.Errorf("target has %d docs, want 300", n)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	first, last := lines[0], lines[len(lines)-1]
	for _, want := range []string{"[INFO]", "couchrep: starting:", "source=" + s.plain + "src/", "target=" + s.plain + "tgt/", "continuous=false"} {
		if !strings.Contains(first, want) {
			t.Errorf("first line %q lacks %q", first, want)
		}
	}
	for _, want := range []string{"couchrep: completed:", "docs_read=300", "docs_written=300", "doc_write_failures=0", "docs_per_second="} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
	if strings.Contains(stdout, "\x1b[") || strings.Contains(stdout, "\r") {
		t.Errorf("terminal control codes in non-terminal output: %q", stdout)
	}
	if s.pass != "" && strings.Contains(stdout+stderr, s.pass+"@") {
		t.Errorf("password printed")
	}
	// A second run resumes from the checkpoint: it reports its own work
	// (nothing) and, separately, the totals with the first run.
	code, stdout, _ = runCLI(t, nil, "--server-uuid", uuid, "--create-target", s.base+"src", s.base+"tgt")
	lines = strings.Split(strings.TrimSpace(stdout), "\n")
	last = lines[len(lines)-1]
	for _, want := range []string{"docs_read=0 ", "docs_written=0 ", "revisions_checked=0 ", "docs_per_second=0 ", "total_docs_read=300", "total_docs_written=300"} {
		if code != exitDone || !strings.Contains(last+" ", want) {
			t.Errorf("second run: exit %d, last line %q lacks %q", code, last, want)
		}
	}
}

// TestResumedSummary: the terminal summary of a resumed run shows this
// run's counts and rate, then the totals with earlier runs.
func TestResumedSummary(t *testing.T) {
	var b bytes.Buffer
	carried := replicate.Stats{DocsRead: 50000, DocsWritten: 50000}
	total := replicate.Stats{DocsRead: 50010, DocsWritten: 50010, DocWriteFailures: 1}
	summary(&b, "bar", nil, "completed", total, carried, 2*time.Second)
	want := "completed: 10 docs read, 10 written, 1 failed in 2s (5 docs/s); with earlier runs: 50,010 read, 50,010 written, 1 failed\n"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
	b.Reset()
	summary(&b, "bar", nil, "completed", replicate.Stats{DocsRead: 3, DocsWritten: 3}, replicate.Stats{}, time.Second)
	if want := "completed: 3 docs read, 3 written, 0 failed in 1s (3 docs/s)\n"; b.String() != want {
		t.Errorf("fresh run: got %q, want %q", b.String(), want)
	}
}

// TestRefusedSummary: a run whose target refused documents ends its
// summary with them and their counts by kind (issue #31 item 2).
func TestRefusedSummary(t *testing.T) {
	st := replicate.Stats{DocsRead: 12, DocsWritten: 10, DocWriteFailures: 2,
		DocWriteFailuresByReason: map[string]int64{replicate.ReasonTooLarge: 1, replicate.ReasonForbidden: 1},
		FailedDocs: []replicate.FailedDoc{
			{ID: "big", Rev: "1-b", Status: 413, Error: "document_too_large", Reason: "big"},
			{ID: "long...", Error: "id_too_long", Reason: "the document id is 300 bytes long"},
		}}
	var b bytes.Buffer
	summary(&b, "bar", nil, "completed", st, replicate.Stats{}, time.Second)
	want := "completed: 12 docs read, 10 written, 2 failed in 1s (10 docs/s)\n" +
		"refused documents (forbidden 1, too_large 1), newest first:\n" +
		"  big 1-b: 413 document_too_large: big\n" +
		"  long...: id_too_long: the document id is 300 bytes long\n"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
	b.Reset()
	log := hclog.New(&hclog.LoggerOptions{Output: &b})
	summary(nil, "log", log, "completed", st, replicate.Stats{}, time.Second)
	if !strings.Contains(b.String(), `doc_write_failures=2 `) || !strings.Contains(b.String(), `doc_write_failures_by_reason="forbidden 1, too_large 1"`) {
		t.Errorf("log summary %q", b.String())
	}
	// Refusals of earlier runs only: the summary of this run names none.
	b.Reset()
	summary(&b, "bar", nil, "completed", st, st, time.Second)
	if strings.Contains(b.String(), "refused") {
		t.Errorf("a run without refusals lists earlier ones: %q", b.String())
	}
}

func TestContinuousInterrupted(t *testing.T) {
	s := startServer(t)
	s.seed(t, "src", 50)
	s.mustDo(t, "PUT", "tgt", nil, 201, 202)
	sig := make(chan os.Signal, 1)
	var code int
	var stdout, stderr string
	done := make(chan struct{})
	go func() {
		code, stdout, stderr = runCLI(t, sig, "--continuous", "--log-interval", "100ms", s.base+"src", s.base+"tgt")
		close(done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for s.docCount(t, "tgt") < 50 {
		if time.Now().After(deadline) {
			t.Fatal("continuous replication did not copy the docs")
		}
		time.Sleep(100 * time.Millisecond)
	}
	sig <- os.Interrupt
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Fatal("couchrep did not stop after an interrupt")
	}
	if code != exitInterrupted {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitInterrupted, stdout, stderr)
	}
	if !strings.Contains(stdout, "couchrep: stopped:") || !strings.Contains(stdout, "docs_written=50") {
		t.Errorf("stdout lacks the stop summary: %s", stdout)
	}
}

// TestConfigFile: --config's [replicator] section reaches the engine
// (max_document_id_length skips and counts every doc of the source) and
// the pool (a client certificate that cannot be loaded is a usage error).
func TestConfigFile(t *testing.T) {
	s := startServer(t)
	s.seed(t, "src", 10) // ids doc0000000…: 10 bytes
	dir := t.TempDir()
	short := writeFile(t, dir, "short.ini", "[replicator]\nmax_document_id_length = 9\n")
	code, stdout, stderr := runCLI(t, nil, "--config", short, "--create-target", s.base+"src", s.base+"tgt")
	if code != exitDone {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "docs_written=0") || !strings.Contains(stdout, "doc_write_failures=10") {
		t.Errorf("ids longer than max_document_id_length were not skipped and counted:\n%s", stdout)
	}
	// doc_write_failure: the [replicator] default, and the flag over it.
	failing := writeFile(t, dir, "fail.ini", "[replicator]\nmax_document_id_length = 9\ndoc_write_failure = fail\n")
	for i, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--config", failing}, exitFailed, "couchrep: doc_write_failed: document `doc000"},
		{[]string{"--config", short, "--doc-write-failure", "fail"}, exitFailed, "longer than max_document_id_length (9); the replication's doc_write_failure is `fail`"},
		{[]string{"--config", failing, "--doc-write-failure", "count"}, exitDone, ""},
		{[]string{"--doc-write-failure", "stop"}, exitUsage, "`doc_write_failure` must be `count` or `fail`"},
	} {
		args := append(tc.args, "--create-target", s.base+"src", s.base+fmt.Sprint("tgt-dwf", i))
		code, stdout, stderr := runCLI(t, nil, args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q\nstdout: %s", tc.args, code, stderr, tc.code, tc.stderr, stdout)
		}
	}
	badCert := writeFile(t, dir, "cert.ini", "[replicator]\ncert_file = "+filepath.Join(dir, "none.pem")+"\nkey_file = "+filepath.Join(dir, "none.key")+"\npassword = hunter2\n")
	code, _, stderr = runCLI(t, nil, "--config", badCert, s.base+"src", s.base+"tgt2")
	if code != exitUsage || !strings.Contains(stderr, "--config") {
		t.Errorf("unusable cert_file: exit %d, stderr %q; want %d and a --config error", code, stderr, exitUsage)
	}
	if strings.Contains(stderr, "hunter2") {
		t.Errorf("the key password was printed: %q", stderr)
	}
}
