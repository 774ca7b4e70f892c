package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ownerFile names the process holding a data directory's store, so that
// a second server started on it can say by whom it is in use.
const ownerFile = "minicouch.pid"

// ErrInUse is returned by Open when another process holds the store.
type ErrInUse struct {
	Dir string
	PID int // 0 when unknown
}

func (e *ErrInUse) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("data directory %s is in use by another process (pid %d)", e.Dir, e.PID)
	}
	return fmt.Sprintf("data directory %s is in use by another process", e.Dir)
}

func inUseError(dir string) error {
	e := &ErrInUse{Dir: dir}
	if b, err := os.ReadFile(filepath.Join(dir, ownerFile)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			e.PID = pid
		}
	}
	return e
}

// writeOwner records this process as the store's holder (best effort: the
// file only improves a message).
func writeOwner(dir string) {
	os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}
