package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/parse"
	"github.com/couchepi/couchepi/plugin/internal/jobserver"
	"github.com/couchepi/couchepi/plugin/internal/monitor"
)

// These tests hold docs/replicator.md to the values of the replicator's
// internal packages, which the docs package cannot import; the docs
// package checks the rest of the pages.

// replicatorDoc returns the text of the section of docs/replicator.md
// titled heading.
func replicatorDoc(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../../docs/replicator.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "\n## "+heading)
	if i < 0 {
		t.Fatalf("docs/replicator.md has no section %q", heading)
	}
	rest := string(b)[i+4:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// configRow is one `| key | default | meaning |` row of a config table.
type configRow struct{ key, def string }

// configRows reads the table rows whose first cell is `key` (or "`a`, `b`"
// with defaults "x, y"); jobs_store has no default and is checked elsewhere.
func configRows(t *testing.T, text string) []configRow {
	t.Helper()
	var rows []configRow
	cell := regexp.MustCompile("`([a-z_]+)`")
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		keys := cell.FindAllStringSubmatch(cells[1], -1)
		defs := strings.Split(strings.TrimSpace(cells[2]), ", ")
		if len(keys) > 1 && len(defs) != len(keys) {
			t.Fatalf("row %q: %d keys, %d defaults", line, len(keys), len(defs))
		}
		for i, k := range keys {
			def := strings.Trim(strings.TrimSpace(cells[2]), "`")
			if len(keys) > 1 {
				def = defs[i]
			}
			rows = append(rows, configRow{key: k[1], def: def})
		}
	}
	return rows
}

func TestDocumentedConfigKeysAndDefaults(t *testing.T) {
	rows := configRows(t, replicatorDoc(t, "Configuration"))
	if len(rows) < 20 {
		t.Fatalf("found only %d config rows", len(rows))
	}
	defaults := map[string]string{}
	for _, r := range rows {
		defaults[r.key] = r.def
	}
	// The documented defaults, all set at once, change nothing.
	sc, err := jobserver.ParseConfig(defaults, nil)
	if err != nil {
		t.Errorf("jobserver refuses a documented default: %v", err)
	}
	if want := jobserver.DefaultConfig(); !reflect.DeepEqual(sc, want) {
		t.Errorf("documented defaults give %+v, the code's are %+v", sc, want)
	}
	po, err := parse.OptionsFromConfig(defaults)
	if err != nil {
		t.Errorf("parse refuses a documented default: %v", err)
	}
	if want := parse.DefaultOptions(); !reflect.DeepEqual(po, want) {
		t.Errorf("documented defaults give %+v, the code's are %+v", po, want)
	}
	// Every documented key is read: a bad value is reported by name, or a
	// different value changes the result.
	for _, r := range rows {
		t.Run(r.key, func(t *testing.T) {
			bad := map[string]string{r.key: "not-a-value"}
			_, e1 := jobserver.ParseConfig(bad, nil)
			_, e2 := parse.OptionsFromConfig(bad)
			for _, e := range []error{e1, e2} {
				if e != nil && strings.Contains(e.Error(), r.key) {
					return
				}
			}
			changed, _ := parse.OptionsFromConfig(map[string]string{r.key: "[{keepalive, false}]"})
			if !reflect.DeepEqual(changed, parse.DefaultOptions()) {
				return
			}
			t.Errorf("[replicator] %s is documented but neither jobserver nor parse reads it", r.key)
		})
	}
}

func TestDocumentedStates(t *testing.T) {
	text := replicatorDoc(t, "States")
	known := map[string]bool{}
	for _, s := range monitor.AllStates() {
		known[s] = true
		if !strings.Contains(text, "`"+s+"`") {
			t.Errorf("state %q (accepted by ?states=) is not in the States section", s)
		}
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|")
	for _, m := range row.FindAllStringSubmatch(text, -1) {
		if !known[m[1]] {
			t.Errorf("documented state %q is not one the monitor knows", m[1])
		}
	}
}
