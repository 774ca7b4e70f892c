package kv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// CompactBolt rewrites the bbolt file at path with only its live data and
// puts the new file in its place. bbolt keeps the pages a deleted or
// overwritten value lived in, bytes and all, until it reuses them; after
// CompactBolt the file holds none of them. The file must not be open in
// this process; another process holding it makes CompactBolt fail with
// ErrLocked after lockTimeout. A crash leaves either the old file or the
// new one at path.
func CompactBolt(path string, lockTimeout time.Duration) error {
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, ReadOnly: true})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return fmt.Errorf("%w: %s (waited %s)", ErrLocked, path, lockTimeout)
		}
		return fmt.Errorf("kv: compact %s: %w", path, err)
	}
	defer src.Close()
	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kv: compact %s: %w", path, err)
	}
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType, NoFreelistSync: true})
	if err != nil {
		return fmt.Errorf("kv: compact %s: %w", path, err)
	}
	err = bolt.Compact(dst, src, 16<<20)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("kv: compact %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
