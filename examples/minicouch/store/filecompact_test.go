package store

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// fillDB writes n documents of about 1 KB, every attEvery-th (0: none)
// with an attachment of attSize random bytes, in _bulk_docs batches, and
// returns their revisions by id.
func fillDB(t testing.TB, db *DB, prefix string, n, attEvery, attSize int) map[string]string {
	t.Helper()
	revs := make(map[string]string, n)
	ctx := context.Background()
	const batch = 500
	for off := 0; off < n; off += batch {
		docs := make([]*Doc, 0, batch)
		for i := off; i < min(off+batch, n); i++ {
			d := &Doc{ID: fmt.Sprintf("%s%08d", prefix, i), Body: benchBody}
			if attEvery > 0 && i%attEvery == 0 {
				data := make([]byte, attSize)
				rand.Read(data)
				d.Attachments = []Attachment{{Name: "a.bin", ContentType: "application/octet-stream", Data: data}}
			}
			docs = append(docs, d)
		}
		res, err := db.BulkDocs(ctx, docs, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatalf("write %s: %v", r.ID, r.Err)
			}
			revs[r.ID] = r.Rev
		}
	}
	return revs
}

func fileStats(t testing.TB, s *Store) FileStats {
	t.Helper()
	st, err := s.FileStats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitFileCompaction waits for a compaction scheduled in the background.
func waitFileCompaction(s *Store) {
	s.fc.wg.Wait()
	s.fc.mu.Lock()
	s.fc.mu.Unlock()
}

func checkBolt(t testing.TB, s *Store) {
	t.Helper()
	err := s.view(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("bbolt check: %v", err)
	}
}

func TestFileCompactionShrinks(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name string
		opts Options
		// act frees the big database's space and returns once any
		// compaction it triggers is done.
		act    func(t *testing.T, s *Store, big *DB, revs map[string]string)
		shrink bool
	}{
		{"delete db", Options{FileCompactMinFree: mib}, deleteBig, true},
		{"delete db, default thresholds", Options{FileCompactMinFree: map[bool]int64{false: 0, true: mib}[raceEnabled]}, deleteBig, true},
		{"delete db, file compaction off", Options{FileCompactMinFree: -1}, deleteBig, false},
		{"delete db, below the ratio", Options{FileCompactMinFree: mib, FileCompactMinFreeRatio: 1}, deleteBig, false},
		{"delete every doc, then _compact", Options{FileCompactMinFree: mib}, func(t *testing.T, s *Store, big *DB, revs map[string]string) {
			var docs []*Doc
			for id, rev := range revs {
				docs = append(docs, &Doc{ID: id, Rev: rev, Deleted: true, Body: []byte("{}")})
			}
			if _, err := big.BulkDocs(context.Background(), docs, true); err != nil {
				t.Fatal(err)
			}
			if err := big.Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitFileCompaction(s)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.NoSync = true
			if raceEnabled && tc.opts.FileCompactMinFreeRatio == 0 {
				// a tenth of the data: too little against the file's
				// 64 MiB first growth to pass the default ratio
				tc.opts.FileCompactMinFreeRatio = 0.05
			}
			s, err := Open(t.TempDir(), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			keep := createTest(t, s, "keep")
			keepRevs := fillDB(t, keep, "k", 200, 10, 4096)
			big := createTest(t, s, "big")
			n := 20_000
			if raceEnabled {
				n = 2_000
			}
			revs := fillDB(t, big, "d", n, 1, 4096)
			peak := fileStats(t, s)
			tc.act(t, s, big, revs)
			after := fileStats(t, s)
			t.Logf("file %.1f MiB -> %.1f MiB (free pages before %.1f MiB, after %.1f MiB)",
				float64(peak.Size)/mib, float64(after.Size)/mib, float64(peak.Free)/mib, float64(after.Free)/mib)
			if tc.shrink && after.Size > peak.Size/4 {
				t.Errorf("file not given back: %d bytes after, %d at the peak", after.Size, peak.Size)
			}
			if !tc.shrink && after.Size < peak.Size {
				t.Errorf("file shrank to %d bytes from %d", after.Size, peak.Size)
			}
			checkBolt(t, s)
			checkDocs(t, keep, keepRevs)
			// The store keeps working on its new file, and after a reopen.
			more := fillDB(t, keep, "m", 100, 5, 1000)
			dir := filepath.Dir(s.Path())
			s.Close()
			if _, err := os.Stat(s.Path() + compactSuffix); !os.IsNotExist(err) {
				t.Errorf("compaction file left behind: %v", err)
			}
			s, err = Open(dir, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			keep, err = s.DB("keep")
			if err != nil {
				t.Fatal(err)
			}
			checkDocs(t, keep, keepRevs)
			checkDocs(t, keep, more)
			checkBolt(t, s)
		})
	}
}

func deleteBig(t *testing.T, s *Store, big *DB, _ map[string]string) {
	if err := s.DeleteDB(big.Name()); err != nil {
		t.Fatal(err)
	}
	waitFileCompaction(s)
}

// checkDocs reads every document of revs at its revision, attachments
// included.
func checkDocs(t testing.TB, db *DB, revs map[string]string) {
	t.Helper()
	ctx := context.Background()
	for id, rev := range revs {
		d, err := db.Get(ctx, id, GetOptions{})
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		if d.Rev != rev {
			t.Fatalf("get %s: rev %s, want %s", id, d.Rev, rev)
		}
		for _, a := range d.Attachments {
			want := a.Length
			if a.Encoding != "" {
				want = a.EncodedLength
			}
			rc, _, err := db.OpenAttachment(ctx, a.Digest)
			if err != nil {
				t.Fatalf("get %s: attachment %s: %v", id, a.Name, err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n != want {
				t.Fatalf("get %s: attachment %s has %d bytes of %d: %v", id, a.Name, n, want, err)
			}
		}
	}
}

// TestFileCompactionConcurrent compacts the file over and over while
// writers write (single docs, bulk batches, streamed attachments), while a
// continuous changes feed follows the database and readers read, and
// checks that no acknowledged write is lost and the feed saw every change
// once, in order.
func TestFileCompactionConcurrent(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "live")
	fillDB(t, db, "pre", 3000, 3, 8192)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		mu    sync.Mutex
		acked = map[string]string{}
		wg    sync.WaitGroup
		stop  atomic.Bool
	)
	ack := func(id, rev string) {
		mu.Lock()
		acked[id] = rev
		mu.Unlock()
	}
	// Under the race detector writers slow down, or each copy (made with
	// writers stopped from the third attempt) takes many seconds.
	pace := func() {
		if raceEnabled {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", g, i)
				doc := &Doc{ID: id, Body: []byte(`{"n":1}`)}
				if i%4 == 0 {
					// a streamed attachment: chunks written in their own
					// transactions before the document's
					data := make([]byte, 3*chunkSize+100)
					rand.Read(data)
					doc.Attachments = []Attachment{{Name: "s.bin", ContentType: "application/octet-stream", Reader: bytes.NewReader(data)}}
				}
				rev, err := db.Put(ctx, doc, true)
				if err != nil {
					t.Errorf("put %s: %v", id, err)
					return
				}
				ack(id, rev)
				pace()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for b := 0; !stop.Load(); b++ {
			revs := fillDB(t, db, fmt.Sprintf("b%d-", b), 200, 0, 0)
			for id, rev := range revs {
				ack(id, rev)
			}
			pace()
		}
	}()
	// Readers: documents and attachments written before the test.
	var reads atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i = (i + 3) % 3000 {
				d, err := db.Get(ctx, fmt.Sprintf("pre%08d", i), GetOptions{})
				if err != nil {
					t.Errorf("get: %v", err)
					return
				}
				for _, a := range d.Attachments {
					rc, _, err := db.OpenAttachment(ctx, a.Digest)
					if err != nil {
						t.Errorf("open attachment: %v", err)
						return
					}
					n, err := io.Copy(io.Discard, rc)
					rc.Close()
					if err != nil || n != a.Length {
						t.Errorf("read attachment: %d of %d bytes, %v", n, a.Length, err)
						return
					}
				}
				reads.Add(1)
			}
		}()
	}
	// A continuous changes feed.
	feedDone := make(chan struct{})
	var feedSeqs []uint64
	feedIDs := map[string]bool{}
	go func() {
		defer close(feedDone)
		var since uint64
		for {
			if _, err := db.Wait(ctx, since); err != nil {
				return
			}
			res, err := db.Changes(ctx, ChangesOptions{Since: since}, func(c Change) error {
				mu.Lock()
				feedSeqs = append(feedSeqs, c.Seq)
				feedIDs[c.ID] = true
				mu.Unlock()
				return nil
			})
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("changes: %v", err)
				}
				return
			}
			since = res.LastSeq
		}
	}()

	var compactions []FileCompaction
	deadline := time.Now().Add(3 * time.Second)
	if raceEnabled {
		deadline = time.Now().Add(time.Second)
	}
	for len(compactions) < 3 || time.Now().Before(deadline) {
		res, err := s.CompactFile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		compactions = append(compactions, res)
		time.Sleep(20 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	// Let the feed catch up with the last write, then stop it.
	last := db.UpdateSeq()
	catchUp := time.Now().Add(5 * time.Second)
	for time.Now().Before(catchUp) && func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(feedSeqs) == 0 || feedSeqs[len(feedSeqs)-1] < last
	}() {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-feedDone

	for _, c := range compactions {
		t.Logf("compaction: %d -> %d bytes, copy %v, %d changes caught up, writes paused %v", c.Before, c.After, c.Copy, c.CaughtUp, c.WritePause)
	}
	t.Logf("%d writes acknowledged, %d reads, %d changes seen", len(acked), reads.Load(), len(feedSeqs))
	checkDocs(t, db, acked)
	for id := range acked {
		if !feedIDs[id] {
			t.Errorf("changes feed missed %s", id)
		}
	}
	for i := 1; i < len(feedSeqs); i++ {
		if feedSeqs[i] <= feedSeqs[i-1] {
			t.Fatalf("changes feed out of order: %d after %d", feedSeqs[i], feedSeqs[i-1])
		}
	}
	if n := len(feedSeqs); n == 0 || feedSeqs[n-1] != last {
		t.Errorf("changes feed stopped before the last seq %d", last)
	}
	checkBolt(t, s)
}

// TestFileCompactionMidIteration compacts the file between the read
// transactions of a running _changes and _all_docs (the callbacks run
// between them) and checks that both deliver every row once.
func TestFileCompactionMidIteration(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "it")
	const n = 3 * changesBatch
	fillDB(t, db, "d", n, 0, 0)
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(row func(id string) error) error
	}{
		{"changes", func(row func(string) error) error {
			_, err := db.Changes(ctx, ChangesOptions{}, func(c Change) error { return row(c.ID) })
			return err
		}},
		{"all_docs", func(row func(string) error) error {
			_, err := db.AllDocs(ctx, AllDocsOptions{}, func(r AllDocsRow) error { return row(r.ID) })
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]int{}
			rows := 0
			err := tc.run(func(id string) error {
				rows++
				seen[id]++
				if rows%(changesBatch/2) == 0 {
					if _, err := s.CompactFile(ctx); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if rows != n || len(seen) != n {
				t.Fatalf("%d rows, %d distinct ids, want %d", rows, len(seen), n)
			}
		})
	}
}

// TestFileCompactionLeftover opens a store whose directory holds what a
// compaction that died before its rename leaves: a partial copy, whole or
// not.
func TestFileCompactionLeftover(t *testing.T) {
	tests := []struct {
		name  string
		write func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("not a bbolt file"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"an older copy", func(t *testing.T, path string) {
			b, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			b.Update(func(tx *bolt.Tx) error {
				_, err := tx.CreateBucket([]byte("dbs"))
				return err
			})
			b.Close()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			db := createTest(t, s, "d")
			revs := fillDB(t, db, "d", 300, 10, 2000)
			s.Close()
			tmp := filepath.Join(dir, FileName+compactSuffix)
			tc.write(t, tmp)
			s, err = Open(dir, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := os.Stat(tmp); !os.IsNotExist(err) {
				t.Errorf("leftover compaction file still there: %v", err)
			}
			db, err = s.DB("d")
			if err != nil {
				t.Fatal(err)
			}
			checkDocs(t, db, revs)
			// and a compaction works with the leftover gone
			if _, err := s.CompactFile(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkDocs(t, db, revs)
		})
	}
}

const compactCrashEnv = "MINICOUCH_STORE_COMPACT_CRASH"

// TestHelperCompactCrash is the child process of TestFileCompactionCrash:
// it writes documents (printing every acknowledged id) to the store in the
// directory named by the environment, compacts the file, and exits at once
// (no Close) at the compaction step the environment names, or is killed.
func TestHelperCompactCrash(t *testing.T) {
	dir := os.Getenv(compactCrashEnv)
	if dir == "" {
		t.Skip("helper process for TestFileCompactionCrash")
	}
	at := os.Getenv(compactCrashEnv + "_STEP")
	prefix := os.Getenv(compactCrashEnv + "_PREFIX")
	db := openCrashDB(dir)
	s := db.s
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	ack := func(id string) {
		mu.Lock()
		fmt.Fprintln(out, "ACK", id)
		out.Flush()
		mu.Unlock()
	}
	compactStep = func(step string) {
		if step == at {
			mu.Lock() // no ack printed after this
			os.Exit(3)
		}
	}
	ctx := context.Background()
	go func() {
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if _, err := db.Put(ctx, &Doc{ID: id, Body: benchBody}, true); err == nil {
				ack(id)
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	for {
		if _, err := s.CompactFile(ctx); err != nil {
			fmt.Println("ERR", err)
			os.Exit(2)
		}
	}
}

// TestFileCompactionCrash stops a process that writes and compacts: at
// each step of a compaction (os.Exit: no fsync, no Close), and with
// SIGKILL at a random moment, then checks that the store opens, is valid
// and holds every acknowledged document.
func TestFileCompactionCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := t.TempDir()
	acked := map[string]bool{}
	for round, at := range []string{"copied", "synced", "caught-up", "renamed", "kill", "kill"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCompactCrash$", "-test.count=1")
		cmd.Env = append(os.Environ(), compactCrashEnv+"="+dir, compactCrashEnv+"_STEP="+at,
			fmt.Sprintf("%s_PREFIX=r%d", compactCrashEnv, round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		kill := time.After(time.Duration(300+round*150) * time.Millisecond)
		if at != "kill" {
			kill = time.After(20 * time.Second)
		}
		n := 0
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				if id, ok := strings.CutPrefix(line, "ACK "); ok {
					acked[id] = true
					n++
				} else if strings.HasPrefix(line, "ERR") {
					t.Fatalf("helper: %s", line)
				}
			case <-kill:
				cmd.Process.Kill()
				kill = nil
			}
		}
		err = cmd.Wait()
		if at != "kill" {
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Fatalf("round %d: helper did not stop at step %s: %v", round, at, err)
			}
		}
		if n == 0 {
			t.Fatalf("round %d: helper acknowledged nothing", round)
		}
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("round %d (%s): reopen: %v", round, at, err)
		}
		checkBolt(t, s)
		db, err := s.DB("crash")
		if err != nil {
			t.Fatal(err)
		}
		present := map[string]bool{}
		if _, err := db.AllDocs(context.Background(), AllDocsOptions{}, func(r AllDocsRow) error {
			present[r.ID] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		lost := 0
		for id := range acked {
			if !present[id] {
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("round %d (%s): %d of %d acknowledged docs lost", round, at, lost, len(acked))
		}
		info, _ := db.Info(context.Background())
		if info.DocCount != uint64(len(present)) {
			t.Errorf("round %d (%s): doc_count %d, all_docs %d", round, at, info.DocCount, len(present))
		}
		t.Logf("round %d (%s): %d acknowledged, %d present", round, at, len(acked), len(present))
		s.Close()
	}
}
