package jobs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/couchepi/couchepi/plugin/kv"
)

// TestAcceptFromWindows: a queue big enough to pick from windows of the id
// space still hands out every job exactly once, whatever its ids look
// like, and stops using windows where they cannot find its jobs.
func TestAcceptFromWindows(t *testing.T) {
	n := pickBatch * 3
	cases := []struct {
		name     string
		id       func(i int) string
		wantMode windowMode // after the first accept
	}{
		{"replication ids", benchID, windowsUsed},
		{"sequential hex", func(i int) string { return fmt.Sprintf("%032x", i) }, windowsUseless},
		{"not hex", func(i int) string { return fmt.Sprintf("job-%06d", i) }, windowsUseless},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := kv.NewMemory()
			defer s.Close()
			q, err := New(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if err := q.SetTypeTimeout(ctx, typ, time.Minute); err != nil {
				t.Fatal(err)
			}
			err = q.Transact(ctx, func(tx *Tx) error {
				for i := 0; i < n; i++ {
					if err := tx.Add(typ, c.id(i), []byte("{}"), time.Time{}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for i := 0; i < n; i++ {
				j, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true})
				if err != nil {
					t.Fatalf("accept %d: %v", i, err)
				}
				if got[j.ID] {
					t.Fatalf("%s accepted twice", j.ID)
				}
				got[j.ID] = true
				// Windows are tried from the second accept on, and given
				// up on at once when they find nothing.
				if i == 1 {
					if m := q.windows.get(typ); m != c.wantMode {
						t.Errorf("window mode after two accepts = %d, want %d", m, c.wantMode)
					}
				}
			}
			if _, err := q.Accept(ctx, typ, AcceptOptions{NoWait: true}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("accept on an empty queue: %v", err)
			}
			if q.windows.get(typ) == windowsUsed {
				t.Errorf("an emptied queue still picks from windows")
			}
		})
	}
}
