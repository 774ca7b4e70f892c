package kv_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/plugin/kv"
)

// watchGoroutines counts the goroutines running code of the embedded
// backends' watch registry.
func watchGoroutines() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "kv.(*watchRegistry).")
}

// TestCloseEndsWatches: when Close returns, every pending watch has fired
// and no goroutine of the watches runs any more.
func TestCloseEndsWatches(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) kv.Store
	}{
		{"memory", func(t *testing.T) kv.Store { return kv.NewMemory() }},
		{"bolt", func(t *testing.T) kv.Store {
			s, err := kv.OpenBolt(filepath.Join(t.TempDir(), "kv.db"), kv.BoltOptions{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.open(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var watches []<-chan struct{}
			for i := 0; i < 256; i++ {
				w, err := s.Watch(ctx, []byte(fmt.Sprintf("w%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				watches = append(watches, w)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for i, w := range watches {
				select {
				case <-w:
				default:
					t.Fatalf("watch %d still pending after Close returned", i)
				}
			}
			if n := watchGoroutines(); n > 0 {
				t.Fatalf("%d watch goroutines still run after Close returned", n)
			}
		})
	}
}
