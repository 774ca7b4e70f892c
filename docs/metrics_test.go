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

// metricName matches a metric name couchepi or minicouch registers, as a Go
// string literal or in backquotes in a page.
var (
	metricLiteral = regexp.MustCompile(`"((?:couchdb|couchepi|minicouch|docguard)_[a-z0-9_]+)"`)
	metricInDoc   = regexp.MustCompile("`((?:couchdb|couchepi|minicouch|docguard)_[a-z0-9_]+)")
)

// metricsPages are the pages that list metrics.
var metricsPages = []string{"replicator.md", "minicouch.md", "plugins.md"}

// codeMetricNames returns every metric name in a non-test Go file of the
// repository that uses the Prometheus client, with the file it is in.
func codeMetricNames(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), `"github.com/prometheus/client_golang/prometheus"`) {
			return nil
		}
		for _, m := range metricLiteral.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// docMetricNames returns the metric names the pages mention, with the page.
func docMetricNames(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	for _, page := range metricsPages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricInDoc.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = page
		}
	}
	return names
}

// TestMetricNamesDocumented keeps the metric lists true: every metric the
// code registers is documented, and every documented metric exists.
func TestMetricNamesDocumented(t *testing.T) {
	code, docs := codeMetricNames(t), docMetricNames(t)
	if len(code) < 30 {
		t.Fatalf("found only %d metric names in the code: %v", len(code), code)
	}
	var undocumented, unknown []string
	for name, file := range code {
		if _, ok := docs[name]; !ok {
			undocumented = append(undocumented, name+" ("+file+")")
		}
	}
	for name, page := range docs {
		if _, ok := code[name]; !ok {
			unknown = append(unknown, name+" ("+page+")")
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unknown)
	for _, n := range undocumented {
		t.Errorf("metric %s is registered but in none of %v", n, metricsPages)
	}
	for _, n := range unknown {
		t.Errorf("documented metric %s is registered nowhere", n)
	}
}

// TestPluginLabelDocumented: the label the host adds to plugin metrics is
// the one replicator.md names.
func TestPluginLabelDocumented(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "host", "gather.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`PluginLabel = "([a-z_]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("host/gather.go no longer defines PluginLabel")
	}
	if want := "`" + string(m[1]) + `="replicator"` + "`"; !strings.Contains(readDoc(t), want) {
		t.Errorf("replicator.md does not show the plugin label as %s", want)
	}
}
