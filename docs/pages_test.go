package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/hooks"
)

// readPage returns the text of one page of this directory.
func readPage(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameSet reports the names only in want and only in got.
func sameSet(t *testing.T, what string, want, got []string) {
	t.Helper()
	in := func(list []string) map[string]bool {
		m := map[string]bool{}
		for _, s := range list {
			m[s] = true
		}
		return m
	}
	w, g := in(want), in(got)
	for _, s := range want {
		if !g[s] {
			t.Errorf("%s: %s is in the code but not documented", what, s)
		}
	}
	for _, s := range got {
		if !w[s] {
			t.Errorf("%s: %s is documented but not in the code", what, s)
		}
	}
}

// TestMinicouchFlags: the Flags table of minicouch.md lists exactly the
// flags minicouch defines.
func TestMinicouchFlags(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "examples", "minicouch", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	for _, m := range regexp.MustCompile(`fs\.(?:String|Bool|Int|Duration|Var)\((?:&\w+, )?"([a-z-]+)"`).FindAllStringSubmatch(string(src), -1) {
		code = append(code, m[1])
	}
	if len(code) < 5 {
		t.Fatalf("found only %d flags in minicouch's main.go", len(code))
	}
	sameSet(t, "minicouch flags", code, flagRows(section(t, readPage(t, "minicouch.md"), "Flags")))
}

// flagRows returns the flags of the rows of a page's flag tables, the rows
// whose first cell starts with `--name`.
func flagRows(text string) []string {
	var flags []string
	for _, m := range flagRow.FindAllStringSubmatch(text, -1) {
		flags = append(flags, m[1])
	}
	return flags
}

var flagRow = regexp.MustCompile("(?m)^\\| `--([a-z-]+)")

// hostAPI returns the exported methods of host.Host and the fields of
// host.Config, read from the host package's source.
func hostAPI(t *testing.T) (methods, fields map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join("..", "host"), func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	methods, fields = map[string]bool{}, map[string]bool{}
	for _, f := range pkgs["host"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || !d.Name.IsExported() {
					continue
				}
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.Name == "Host" {
					methods[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || ts.Name.Name != "Config" {
						continue
					}
					for _, fl := range ts.Type.(*ast.StructType).Fields.List {
						for _, n := range fl.Names {
							fields[n.Name] = true
						}
					}
				}
			}
		}
	}
	return methods, fields
}

// TestEmbeddingNamesHostAPI: every h.Method embedding.md calls is a method
// of *host.Host, and every host.Config field its example sets exists.
func TestEmbeddingNamesHostAPI(t *testing.T) {
	methods, fields := hostAPI(t)
	if len(methods) < 10 || len(fields) < 5 {
		t.Fatalf("read only %d Host methods and %d Config fields", len(methods), len(fields))
	}
	page := readPage(t, "embedding.md")
	calls := regexp.MustCompile(`\bh\.([A-Z][A-Za-z]*)\(`).FindAllStringSubmatch(page, -1)
	if len(calls) < 10 {
		t.Fatalf("embedding.md calls only %d host methods", len(calls))
	}
	for _, m := range calls {
		if !methods[m[1]] {
			t.Errorf("embedding.md calls h.%s, which *host.Host does not have", m[1])
		}
	}
	i := strings.Index(page, "host.New(host.Config{")
	if i < 0 {
		t.Fatal("embedding.md has no host.New(host.Config{…}) example")
	}
	block := page[i:]
	block = block[:strings.Index(block, "})")]
	for _, m := range regexp.MustCompile(`(?m)^\s+([A-Z][A-Za-z]*):`).FindAllStringSubmatch(block, -1) {
		if !fields[m[1]] {
			t.Errorf("embedding.md sets host.Config.%s, which does not exist", m[1])
		}
	}
}

// TestEmbeddingServices: the Services interface shown in embedding.md has
// the methods of hooks.Services.
func TestEmbeddingServices(t *testing.T) {
	typ := reflect.TypeOf((*hooks.Services)(nil)).Elem()
	var code []string
	for i := 0; i < typ.NumMethod(); i++ {
		code = append(code, typ.Method(i).Name)
	}
	page := readPage(t, "embedding.md")
	i := strings.Index(page, "type Services interface {")
	if i < 0 {
		t.Fatal("embedding.md does not show the Services interface")
	}
	block := page[i:]
	block = block[:strings.Index(block, "\n}")]
	var doc []string
	for _, m := range regexp.MustCompile(`(?m)^\s+([A-Z][A-Za-z]*)\(ctx`).FindAllStringSubmatch(block, -1) {
		doc = append(doc, m[1])
	}
	sort.Strings(doc)
	sameSet(t, "hooks.Services", code, doc)
}

// TestReadmeLayoutNamesPluginPackages: the `plugin/` row of README's
// layout table names every package under plugin/ (by its path below
// plugin/ or plugin/internal/, or its last element), so a package added
// or moved is described where readers look for it.
func TestReadmeLayoutNamesPluginPackages(t *testing.T) {
	readme := readPage(t, "../README.md")
	var row string
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "| `plugin/` |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("README's layout table has no `plugin/` row")
	}
	dirs := map[string]bool{}
	err := filepath.WalkDir("../plugin", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			dirs[filepath.ToSlash(filepath.Dir(path))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found %d packages under plugin/", len(dirs))
	}
	for dir := range dirs {
		rel := strings.TrimPrefix(strings.TrimPrefix(dir, "../plugin/"), "internal/")
		if !strings.Contains(row, "`"+rel+"`") && !strings.Contains(row, "`"+filepath.Base(dir)+"`") {
			t.Errorf("README's `plugin/` row does not name %s", strings.TrimPrefix(dir, "../"))
		}
	}
}
