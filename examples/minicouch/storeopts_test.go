package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/couchepi/couchepi/examples/minicouch/config"
	"github.com/hashicorp/go-hclog"
)

func TestStoreOptionsFromConfig(t *testing.T) {
	tests := []struct {
		ini      string
		minFree  int64
		minRatio float64
	}{
		{"", 0, 0},
		{"[minicouch]\nfile_compaction_min_free = 1048576\nfile_compaction_min_free_percent = 25\n", 1 << 20, 0.25},
		{"[minicouch]\nfile_compaction_min_free = -1\n", -1, 0},
	}
	for _, tc := range tests {
		dir := t.TempDir()
		base := filepath.Join(dir, "minicouch.ini")
		if err := os.WriteFile(base, []byte(tc.ini), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(base, dir)
		if err != nil {
			t.Fatal(err)
		}
		o := storeOptions(cfg, hclog.NewNullLogger())
		if o.FileCompactMinFree != tc.minFree || o.FileCompactMinFreeRatio != tc.minRatio {
			t.Errorf("%q: min free %d, ratio %v; want %d, %v", tc.ini, o.FileCompactMinFree, o.FileCompactMinFreeRatio, tc.minFree, tc.minRatio)
		}
	}
}
