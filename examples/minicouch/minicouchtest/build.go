package minicouchtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// modulePath is couchepi's module path, the prefix of the *Pkg import paths.
const modulePath = "github.com/couchepi/couchepi"

// Import paths of the binaries tests run.
const (
	MinicouchPkg  = modulePath + "/examples/minicouch"
	ReplicatorPkg = modulePath + "/plugin/cmd/replicator"
	DocguardPkg   = modulePath + "/examples/docguard"
	CouchrepPkg   = modulePath + "/plugin/cmd/couchrep"
)

// Build names one binary: a package, its link flags and whether it is built
// with the race detector.
type Build struct {
	Pkg     string // import path, e.g. ReplicatorPkg
	LDFlags string // e.g. "-X main.version=v2"
	Tags    string // go build -tags, e.g. "couchepi_nextformat"
	Race    bool   // go build -race
}

// built is one Build's outcome, shared by every caller in the process.
type built struct {
	once sync.Once
	path string
	err  error
}

var (
	cacheMu  sync.Mutex
	cacheDir string
	cache    = map[Build]*built{}
)

// Binary builds b once per test process (concurrent callers wait for the
// same build) into a temporary directory that Main removes, and returns the
// binary's path.
func Binary(b Build) (string, error) {
	cacheMu.Lock()
	if cacheDir == "" {
		dir, err := os.MkdirTemp("", "couchepi-testbin-")
		if err != nil {
			cacheMu.Unlock()
			return "", err
		}
		cacheDir = dir
	}
	dir := cacheDir
	e := cache[b]
	if e == nil {
		e = &built{}
		cache[b] = e
	}
	name := fmt.Sprintf("%s-%d", filepath.Base(b.Pkg), len(cache))
	cacheMu.Unlock()
	e.once.Do(func() {
		out := filepath.Join(dir, name)
		args := []string{"build", "-o", out}
		if b.LDFlags != "" {
			args = append(args, "-ldflags", b.LDFlags)
		}
		if b.Tags != "" {
			args = append(args, "-tags", b.Tags)
		}
		if b.Race {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, b.Pkg)...)
		if msg, err := cmd.CombinedOutput(); err != nil {
			e.err = fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, msg)
			return
		}
		e.path = out
	})
	return e.path, e.err
}

// MustBinary is Binary that fails t when the build fails.
func MustBinary(t testing.TB, b Build) string {
	t.Helper()
	p, err := Binary(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Minicouch returns the minicouch binary, built without -race.
func Minicouch(t testing.TB) string {
	t.Helper()
	return MustBinary(t, Build{Pkg: MinicouchPkg})
}

// Replicator returns the replicator plugin built with main.version set to
// version ("" keeps the default), with -race when the test binary has it.
func Replicator(t testing.TB, version string) string {
	t.Helper()
	b := Build{Pkg: ReplicatorPkg, Race: RaceEnabled}
	if version != "" {
		b.LDFlags = "-X main.version=" + version
	}
	return MustBinary(t, b)
}

// removeBinaries deletes the build directory.
func removeBinaries() {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if cacheDir != "" {
		os.RemoveAll(cacheDir)
		cacheDir = ""
		cache = map[Build]*built{}
	}
}
