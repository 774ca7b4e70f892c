package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

const crashEnv = "MINICOUCH_STORE_CRASH_DIR"

// TestHelperWriter is the child process of TestCrashKill9: it writes
// _bulk_docs batches (and concurrent single-doc puts) to the store in the
// directory named by the environment and prints every acknowledged id.
// openCrashDB opens, in a helper process of a crash test, the store in dir
// and its db "crash", creating it the first time; it exits the process
// with status 2 (printing ERR) when it cannot.
func openCrashDB(dir string) *DB {
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	db, err := s.DB("crash")
	if err != nil {
		db, err = s.CreateDB("crash")
	}
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	return db
}

func TestHelperWriter(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashKill9")
	}
	db := openCrashDB(dir)
	prefix := os.Getenv(crashEnv + "_PREFIX")
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	ack := func(ids ...string) {
		mu.Lock()
		for _, id := range ids {
			fmt.Fprintln(out, "ACK", id)
		}
		out.Flush()
		mu.Unlock()
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("%s-single-%d-%d", prefix, g, i)
				if _, err := db.Put(ctx, &Doc{ID: id, Body: []byte(`{"single":true}`)}, true); err == nil {
					ack(id)
				}
			}
		}()
	}
	body := []byte(`{"payload":"` + strings.Repeat("x", 900) + `"}`)
	for b := 0; ; b++ {
		docs := make([]*Doc, 200)
		ids := make([]string, len(docs))
		for i := range docs {
			ids[i] = fmt.Sprintf("%s-bulk-%d-%d", prefix, b, i)
			docs[i] = &Doc{ID: ids[i], Body: body}
		}
		res, err := db.BulkDocs(ctx, docs, true)
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(2)
		}
		for i, r := range res {
			if r.Err != nil {
				ids[i] = ""
			}
		}
		ack(ids...)
	}
}

// TestCrashKill9 kills a writer process with SIGKILL mid-stream, twice, and
// checks that every acknowledged document survived and the store is
// consistent.
func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := t.TempDir()
	acked := map[string]bool{}
	for round := range 2 {
		killMidStream(t, "TestHelperWriter", crashEnv+"="+dir, round, 3000+round*1000, func(f []string) {
			if len(f) == 2 {
				acked[f[1]] = true
			}
		})

		s, db := reopenCrashed(t, dir)
		ctx := context.Background()
		present := map[string]bool{}
		if _, err := db.AllDocs(ctx, AllDocsOptions{}, func(r AllDocsRow) error {
			present[r.ID] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for id := range acked {
			if !present[id] {
				t.Errorf("round %d: acknowledged doc %s lost", round, id)
			}
		}
		info, _ := db.Info(ctx)
		changes := 0
		var last uint64
		db.Changes(ctx, ChangesOptions{}, func(c Change) error {
			changes++
			last = c.Seq
			return nil
		})
		if info.DocCount != uint64(len(present)) || changes != len(present) || last != info.UpdateSeq {
			t.Errorf("round %d: inconsistent: doc_count %d, all_docs %d, changes %d, last seq %d, update_seq %d",
				round, info.DocCount, len(present), changes, last, info.UpdateSeq)
		}
		t.Logf("round %d: %d acknowledged, %d present, update_seq %d", round, len(acked), len(present), info.UpdateSeq)
		s.Close()
	}
}

// TestHelperAttWriter is the child process of TestCrashKill9Attachments:
// it writes documents with one attachment of a file blob's size each,
// from three goroutines, and prints "ACK id digest" for every
// acknowledged one.
func TestHelperAttWriter(t *testing.T) {
	dir := os.Getenv(crashEnv + "_ATTS")
	if dir == "" {
		t.Skip("helper process for TestCrashKill9Attachments")
	}
	db := openCrashDB(dir)
	prefix := os.Getenv(crashEnv + "_PREFIX")
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("%s-att-%d-%d", prefix, g, i)
				data := randomBytes(uint64(g*1e6+i), fileBlobMin+i)
				doc := &Doc{ID: id, Body: []byte(`{}`), Attachments: []Attachment{{Name: "a", Follows: true, Length: int64(len(data)), Reader: bytes.NewReader(data)}}}
				if _, err := db.Put(context.Background(), doc, true); err == nil {
					mu.Lock()
					fmt.Println("ACK", id, digestOf(data))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

// TestCrashKill9Attachments kills a process writing attachments kept in
// files with SIGKILL, twice: every acknowledged attachment reads back
// whole after the restart, and no file is left that no entry references.
func TestCrashKill9Attachments(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := t.TempDir()
	acked := map[string]string{}
	for round := range 2 {
		killMidStream(t, "TestHelperAttWriter", crashEnv+"_ATTS="+dir, round, 20, func(f []string) {
			if len(f) == 3 {
				acked[f[1]] = f[2]
			}
		})

		s, db := reopenCrashed(t, dir)
		ctx := context.Background()
		for id, digest := range acked {
			a, err := db.GetAttachment(ctx, id, "", "a")
			if err != nil || a.Digest != digest {
				t.Errorf("round %d: acknowledged %s: %v, digest %s, want %s", round, id, err, a.Digest, digest)
				continue
			}
			if got := digestOf(readAtt(t, db, digest)); got != digest {
				t.Errorf("round %d: %s reads back as %s, want %s", round, id, got, digest)
			}
		}
		var ids map[[8]byte]bool
		if err := db.view(func(b *bolt.Bucket) error {
			var err error
			ids, err = fileBlobIDs(b)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		files := blobFiles(t, db)
		if len(files) != len(ids) {
			t.Errorf("round %d: %d files, %d referenced: %v", round, len(files), len(ids), files)
		}
		t.Logf("round %d: %d acknowledged, %d files", round, len(acked), len(files))
		s.Close()
	}
}

// killMidStream runs the helper test helper in a child process with env
// and the round's id prefix, hands ack the fields of each "ACK …" line it
// prints, and kills it with SIGKILL after want of them (or 20 s); the
// lines printed before it died count too. An "ERR" line fails the test.
func killMidStream(t *testing.T, helper, env string, round, want int, ack func(fields []string)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env, fmt.Sprintf("%s_PREFIX=r%d", crashEnv, round))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	n := 0
	record := func(line string) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "ACK" {
			ack(f)
			n++
		} else if strings.HasPrefix(line, "ERR") {
			t.Fatalf("helper: %s", line)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for sc.Scan() {
		record(sc.Text())
		if n >= want || time.Now().After(deadline) {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		record(sc.Text())
	}
	cmd.Wait()
	if n == 0 {
		t.Fatalf("round %d: helper acknowledged nothing", round)
	}
}

// reopenCrashed opens the store a killed writer left in dir, and its
// "crash" database.
func reopenCrashed(t *testing.T, dir string) (*Store, *DB) {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	db, err := s.DB("crash")
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}
