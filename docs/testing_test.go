package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// envLiteral matches an environment variable name of the project, as a Go or
// shell string.
var envLiteral = regexp.MustCompile(`\b((?:COUCHEPI|COUCHREP|MINICOUCH|INTEROP)_[A-Z0-9_]+|FDB_CLUSTER_FILE|CHROMIUM)\b`)

// envNames returns the environment variable names read by the repository's
// Go files and scripts (node_modules and dot directories left out), each
// with one file that reads it.
func envNames(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && (d.Name() == "node_modules" || d.Name() == "docs" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".sh") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), "Getenv") && !strings.Contains(string(b), "Environ") &&
			!strings.Contains(string(b), "MagicCookie") && !strings.HasSuffix(path, ".sh") {
			return nil
		}
		for _, m := range envLiteral.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestTestingDocNamesEveryEnvVar: every environment variable the code and
// scripts read is in testing.md, and every one testing.md names is read.
func TestTestingDocNamesEveryEnvVar(t *testing.T) {
	doc := readPage(t, "testing.md")
	names := envNames(t)
	if len(names) < 10 {
		t.Fatalf("found only %d environment variables: %v", len(names), names)
	}
	var missing []string
	for name, file := range names {
		if !strings.Contains(doc, "`"+name) {
			missing = append(missing, name+" ("+file+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("environment variable %s is not in testing.md", m)
	}
	for _, m := range envLiteral.FindAllStringSubmatch(doc, -1) {
		if _, ok := names[m[1]]; !ok {
			t.Errorf("testing.md names %s, which nothing reads", m[1])
		}
	}
}

// makeTargets returns the targets the Makefile defines.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z-]*):`).FindAllStringSubmatch(readPage(t, filepath.Join("..", "Makefile")), -1) {
		targets[m[1]] = true
	}
	return targets
}

// TestTestingDocMakeTargets: every `make X` in testing.md is a target of
// the Makefile, and every test-like target is documented.
func TestTestingDocMakeTargets(t *testing.T) {
	targets := makeTargets(t)
	doc := readPage(t, "testing.md")
	for _, m := range regexp.MustCompile("`make ([a-z][a-z-]*)").FindAllStringSubmatch(doc, -1) {
		if !targets[m[1]] {
			t.Errorf("testing.md runs `make %s`, which the Makefile does not define", m[1])
		}
	}
	for _, want := range []string{"test", "test-short", "test-browser", "fuzz", "bench", "interop-deps", "browser-deps"} {
		if !targets[want] {
			t.Errorf("Makefile has no %s target", want)
		}
		if !strings.Contains(doc, "`make "+want) {
			t.Errorf("testing.md does not mention `make %s`", want)
		}
	}
}

// benchRow matches a row of testing.md's benchmark table: its first cell
// (the benchmarks) and the package.
var benchRow = regexp.MustCompile("(?m)^\\| (`Benchmark[^|]*)\\| `([a-z0-9_/]+)` \\|")

// TestTestingDocBenchmarksInTheirPackage: every benchmark testing.md lists
// is defined in the package it names (packages move, benchmarks are
// renamed).
func TestTestingDocBenchmarksInTheirPackage(t *testing.T) {
	doc := readPage(t, "testing.md")
	rows := benchRow.FindAllStringSubmatch(doc, -1)
	if len(rows) < 20 {
		t.Fatalf("found %d benchmark rows in testing.md; the table's format changed?", len(rows))
	}
	name := regexp.MustCompile("`(Benchmark[A-Za-z0-9_]+)`")
	for _, row := range rows {
		files, err := filepath.Glob(filepath.Join("..", row[2], "*_test.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("testing.md: package %s has no tests (%v)", row[2], err)
			continue
		}
		var src strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
		for _, m := range name.FindAllStringSubmatch(row[1], -1) {
			if !strings.Contains(src.String(), "func "+m[1]+"(") {
				t.Errorf("testing.md: %s is not in %s", m[1], row[2])
			}
		}
	}
}
