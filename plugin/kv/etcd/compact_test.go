package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
	"github.com/couchepi/couchepi/plugin/kv/etcd"
	"github.com/couchepi/couchepi/plugin/kv/etcd/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func newClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// readableAt reports whether etcd still has the history at rev.
func readableAt(t *testing.T, cli *clientv3.Client, rev int64) bool {
	t.Helper()
	_, err := cli.Get(t.Context(), "any", clientv3.WithRev(rev))
	if errors.Is(err, rpctypes.ErrCompacted) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestCompactRounds: two nodes share a store; each round compacts up to
// the revision its node saw one round earlier, and a node does not
// compact again when another compacted since its previous round.
func TestCompactRounds(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	open := func() *etcd.Store {
		s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: c.Endpoints(), Prefix: "rounds/", CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	n1, n2 := open(), open()
	cli := newClient(t, c.Endpoints())
	write := func() {
		t.Helper()
		for i := 0; i < 3; i++ {
			if err := n1.Update(t.Context(), func(tx kv.Tx) error { tx.Set([]byte("k"), []byte(fmt.Sprint(i))); return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	round := func(s *etcd.Store, candidate int64) int64 {
		t.Helper()
		rev, err := etcd.CompactRound(s, candidate)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	write()
	a := round(n1, 0) // a first round only looks
	write()
	b := round(n2, 0)
	write()
	if !readableAt(t, cli, a-1) {
		t.Fatal("a first round compacted")
	}
	a2 := round(n1, a) // compacts up to a
	if readableAt(t, cli, a-1) || !readableAt(t, cli, a) {
		t.Fatalf("after n1's round: history before %d should be gone, from it kept", a)
	}
	write()
	round(n2, b) // n1 compacted after n2 saw b: n2 leaves it
	if !readableAt(t, cli, b-1) {
		t.Fatalf("n2 compacted to %d although n1 had compacted since", b)
	}
	write()
	round(n1, a2) // n1's next round compacts up to what it saw last time
	if readableAt(t, cli, a2-1) || !readableAt(t, cli, a2) {
		t.Fatalf("n1's second round: history before %d should be gone, from it kept", a2)
	}
}

// TestCompactLoop: with a short interval, a store compacts etcd's history
// by itself, and transactions keep working throughout.
func TestCompactLoop(t *testing.T) {
	c := etcdtest.StartCluster(t, 1)
	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: c.Endpoints(), Prefix: "loop/",
		CleanInterval: 50 * time.Millisecond, CompactInterval: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cli := newClient(t, c.Endpoints())
	first, err := cli.Put(t.Context(), "loop/start", "x")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; readableAt(t, cli, first.Header.Revision); i++ {
		if time.Now().After(deadline) {
			t.Fatal("history not compacted after 30s")
		}
		err := s.Update(t.Context(), func(tx kv.Tx) error {
			v, err := tx.Get([]byte("n"))
			if err != nil {
				return err
			}
			tx.Set([]byte("n"), append(v, 'x'))
			return nil
		})
		if err != nil {
			t.Fatalf("Update %d while compacting: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCompactDefragmentScrubs: after Compact and Defragment, a value that
// was overwritten is gone from every member's data file (etcd's WAL keeps
// it until etcd purges old segments), and the files shrank.
func TestCompactDefragmentScrubs(t *testing.T) {
	c := etcdtest.StartCluster(t, 3)
	s, err := etcd.Open(t.Context(), etcd.Config{Endpoints: c.Endpoints(), Prefix: "scrub/", CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cli := newClient(t, c.Endpoints())
	secret := []byte("SCRUB-ME-7f3a9c")
	pad := bytes.Repeat([]byte("p"), 64<<10)
	for i := 0; i < 50; i++ { // several MB of history
		v := append(append([]byte(fmt.Sprintf("%d:", i)), secret...), pad...)
		if err := s.Update(t.Context(), func(tx kv.Tx) error { tx.Set([]byte("k"), v); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Update(t.Context(), func(tx kv.Tx) error { tx.Set([]byte("k"), []byte("clean")); return nil }); err != nil {
		t.Fatal(err)
	}
	sizes := func() []int64 {
		var out []int64
		for _, ep := range c.Endpoints() {
			st, err := cli.Status(t.Context(), ep)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, st.DbSize)
		}
		return out
	}
	before := sizes()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Defragment(ctx); err != nil {
		t.Fatal(err)
	}
	after := sizes()
	for i, dir := range c.DataDirs() {
		db := filepath.Join(dir, "member", "snap", "db")
		b, err := os.ReadFile(db)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, secret); n != 0 {
			t.Errorf("member %d: %s holds the overwritten value %d times", i, db, n)
		}
		if after[i] >= before[i] {
			t.Errorf("member %d: data file %d bytes after defragmenting, %d before", i, after[i], before[i])
		}
	}
	err = s.View(t.Context(), func(tx kv.ReadTx) error {
		v, err := tx.Get([]byte("k"))
		if err == nil && !strings.EqualFold(string(v), "clean") {
			err = fmt.Errorf("k = %.20q", v)
		}
		return err
	})
	if err != nil {
		t.Fatalf("the live value after compaction and defragmentation: %v", err)
	}
}
