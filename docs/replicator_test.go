// Package docs holds couchepi's user documentation. Its tests keep the pages
// true to the code: every `[replicator]` key the plugin reads is in
// replicator.md (its defaults and states are checked against the
// replicator's internal packages by plugin/cmd/replicator/docs_test.go,
// which can import them), every metric registered is listed and every
// listed one registered,
// testing.md names every environment variable and make target the tests use,
// and every command the pages show is checked, the curl and couchrep ones
// run against a minicouch (commands_test.go, commands_run_test.go).
package docs

import (
	"regexp"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/parse"
)

// section returns the text of the markdown section titled heading.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n## "+heading)
	if i < 0 {
		t.Fatalf("no section %q", heading)
	}
	rest := doc[i+4:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// readDoc returns replicator.md.
func readDoc(t *testing.T) string { return readPage(t, "replicator.md") }

// TestReplicatorConfigKeysAllDocumented: every `[replicator]` key jobserver
// and parse read (found in their source) is in the Configuration section,
// so a new key cannot ship undocumented.
func TestReplicatorConfigKeysAllDocumented(t *testing.T) {
	text := section(t, readDoc(t), "Configuration")
	key := regexp.MustCompile(`(?:int|dur|float|bool)Key\((?:&[\w.]+, )?"([a-z_]+)"`)
	found := 0
	for _, file := range []string{"../plugin/internal/jobserver/config.go", "../parse/options.go"} {
		for _, m := range key.FindAllStringSubmatch(readPage(t, file), -1) {
			found++
			if !strings.Contains(text, "`"+m[1]+"`") {
				t.Errorf("[replicator] %s is read by %s but not documented", m[1], file)
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d config keys in the source", found)
	}
}

// TestDefaultDeniedNetworksDocumented (issue 38 item 2): the networks the
// host policy denies by default are the ones replicator.md lists.
func TestDefaultDeniedNetworksDocumented(t *testing.T) {
	text := section(t, readDoc(t), "Limiting the hosts replications reach")
	nets := parse.DefaultDeniedNetworks()
	if len(nets) == 0 {
		t.Fatal("no default denied networks")
	}
	for _, n := range nets {
		s := n.String()
		if n.IsSingleIP() {
			s = n.Addr().String()
		}
		if !strings.Contains(text, "`"+s+"`") {
			t.Errorf("%s is denied by default but not in replicator.md", s)
		}
	}
}
