package store

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDatabases(t *testing.T) {
	s := openTest(t)
	for _, n := range []string{"b", "a", "c/_replicator", "a/b"} {
		createTest(t, s, n)
	}
	if _, err := s.CreateDB("a"); !isErr(err, ErrDBExists) {
		t.Fatalf("create existing: %v", err)
	}
	names, err := s.ListDBs()
	if err != nil || !slices.Equal(names, []string{"a", "a/b", "b", "c/_replicator"}) {
		t.Fatalf("ListDBs = %v, %v", names, err)
	}
	db, _ := s.DB("a")
	uuid := db.UUID()
	if len(uuid) != 32 {
		t.Fatalf("uuid %q", uuid)
	}
	put(t, db, `{"_id":"x"}`)
	if err := s.DeleteDB("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDB("a"); !isErr(err, ErrDBNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
	if _, err := s.DB("a"); !isErr(err, ErrDBNotFound) {
		t.Fatalf("DB of deleted: %v", err)
	}
	if _, err := db.Get(context.Background(), "x", GetOptions{}); !isErr(err, ErrDBNotFound) {
		t.Fatalf("stale handle read: %v", err)
	}
	db2 := createTest(t, s, "a")
	if db2.UUID() == uuid {
		t.Fatal("recreated db kept its uuid")
	}
	if _, err := db.Put(context.Background(), mustParse(t, `{"_id":"y"}`), true); !isErr(err, ErrDBNotFound) {
		t.Fatalf("stale handle write into recreated db: %v", err)
	}
	info, err := db2.Info(context.Background())
	if err != nil || info.DocCount != 0 || info.UpdateSeq != 0 || info.InstanceStartTime != "0" {
		t.Fatalf("info of recreated db: %+v %v", info, err)
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := createTest(t, s, "d")
	rev := put(t, db, `{"_id":"x","v":1}`)
	put(t, db, `{"_id":"_local/cp","seq":5}`)
	if err := db.SetSecurity(context.Background(), []byte(`{"admins":{"names":["bob"]}}`)); err != nil {
		t.Fatal(err)
	}
	if err := db.SetRevsLimit(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err = s.DB("d")
	if err != nil {
		t.Fatal(err)
	}
	d, err := db.Get(context.Background(), "x", GetOptions{})
	if err != nil || d.Rev != rev {
		t.Fatalf("after reopen: %v %v", d, err)
	}
	if db.UpdateSeq() != 1 || db.RevsLimit() != 7 {
		t.Fatalf("seq %d revs_limit %d", db.UpdateSeq(), db.RevsLimit())
	}
	sec, _ := db.Security(context.Background())
	if string(sec) != `{"admins":{"names":["bob"]}}` {
		t.Fatalf("security %s", sec)
	}
	l, err := db.Get(context.Background(), "_local/cp", GetOptions{})
	if err != nil || docJSON(t, l) != `{"_id":"_local/cp","_rev":"0-1","seq":5}` {
		t.Fatalf("local after reopen: %v", err)
	}
}

func TestInfoCounters(t *testing.T) {
	s := openTest(t)
	db := createTest(t, s, "d")
	ctx := context.Background()
	r1 := put(t, db, `{"_id":"a"}`)
	put(t, db, `{"_id":"b"}`)
	put(t, db, `{"_id":"_local/l"}`)
	if _, err := db.Delete(ctx, "a", r1); err != nil {
		t.Fatal(err)
	}
	info, _ := db.Info(ctx)
	if info.DocCount != 1 || info.DocDelCount != 1 || info.UpdateSeq != 3 {
		t.Fatalf("info %+v", info)
	}
	if info.Sizes.Active <= 0 || info.Sizes.External <= 0 {
		t.Fatalf("sizes %+v", info.Sizes)
	}
	sec, _ := db.Security(ctx)
	if string(sec) != "{}" {
		t.Fatalf("default security %s", sec)
	}
	if err := db.SetRevsLimit(ctx, 0); err == nil {
		t.Fatal("revs_limit 0 accepted")
	}
}

// TestOpenInUse: a second Open of a held data directory fails at once,
// saying the directory is in use and by which process.
func TestOpenInUse(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	_, err = Open(dir, Options{NoSync: true, OpenTimeout: 100 * time.Millisecond})
	var inUse *ErrInUse
	if !errors.As(err, &inUse) || inUse.PID != os.Getpid() {
		t.Fatalf("second Open: %v, want ErrInUse naming pid %d", err, os.Getpid())
	}
	if want := "data directory " + dir + " is in use by another process (pid "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}
