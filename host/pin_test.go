package host

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestPinnedBinaryRace (issue 11 item 1): while another process keeps
// atomically renaming an unpinned binary over the pinned path, every reload
// with the pin either fails or runs the pinned bytes; never the other ones.
func TestPinnedBinaryRace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plugin")
	v1, err := os.ReadFile(docguardV1)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := os.ReadFile(docguardV2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, v1, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, _ := checksum(docguardV1)
	h, _ := newTestHost(t, Config{Config: guardConfig(nil)}, Spec{Path: path, SHA256: sum})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b := v1
			if i%2 == 0 {
				b = v2
			}
			tmp := filepath.Join(dir, "next")
			if os.WriteFile(tmp, b, 0o755) == nil {
				os.Rename(tmp, path)
			}
		}
	}()
	reloads, refused, wrong := 0, 0, 0
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && reloads < 150 {
		err := h.Reload(context.Background(), "docguard", Spec{Path: path, SHA256: sum})
		if err != nil {
			refused++
			continue
		}
		reloads++
		if st := h.Plugins(); len(st) != 1 || st[0].Version != "v1" {
			wrong++
			t.Errorf("reload %d runs %+v, not the pinned v1", reloads, st)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reloads, %d refused (checksum mismatch), %d ran an unpinned binary", reloads, refused, wrong)
	if reloads == 0 {
		t.Fatal("no reload succeeded")
	}
}
