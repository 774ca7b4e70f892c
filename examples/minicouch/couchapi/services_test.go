package couchapi

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/couchepi/couchepi/hooks"
)

func TestServices(t *testing.T) {
	ts, srv := newTestServer(t)
	ctx := context.Background()
	runSteps(t, ts.URL, []step{
		{name: "db", method: "PUT", path: "/db", status: 201},
		{name: "docs", method: "POST", path: "/db/_bulk_docs", body: `{"docs":[{"_id":"a"},{"_id":"b"},{"_id":"c"}]}`, status: 201},
		{name: "local", method: "PUT", path: "/db/_local/x", body: `{}`, status: 201},
	})
	info, err := srv.ServerInfo(ctx)
	if err != nil || len(info.UUID) != 32 || info.Node != NodeName || info.URL != ts.URL+"/" || info.Vendor != Vendor {
		t.Errorf("ServerInfo: %+v %v", info, err)
	}
	dbs, err := srv.ListDBs(ctx)
	if err != nil || len(dbs) != 3 || dbs[2].Name != "db" || !strings.HasPrefix(dbs[2].UpdateSeq, "3-") {
		t.Errorf("ListDBs: %+v %v", dbs, err)
	}
	page, err := srv.Changes(ctx, "db", "", 2)
	if err != nil || len(page.Results) != 2 || page.Pending != 1 || page.Results[0].ID != "a" {
		t.Fatalf("Changes: %+v %v", page, err)
	}
	page, err = srv.Changes(ctx, "db", page.LastSeq, 10)
	if err != nil || len(page.Results) != 1 || page.Results[0].ID != "c" || page.Pending != 0 {
		t.Errorf("Changes from last seq: %+v %v", page, err)
	}
	tests := []struct {
		name   string
		run    func() error
		status int
	}{
		{"bad since", func() error { _, err := srv.Changes(ctx, "db", "x", 1); return err }, 400},
		{"missing db", func() error { _, err := srv.Changes(ctx, "nodb", "", 1); return err }, 404},
		{"missing doc", func() error { _, err := srv.GetDoc(ctx, "db", "zz"); return err }, 404},
		{"found doc", func() error { _, err := srv.GetDoc(ctx, "db", "a"); return err }, 0},
		{"update conflict", func() error { _, err := srv.UpdateDoc(ctx, "db", []byte(`{"_id":"a","x":1}`)); return err }, 409},
		{"update new", func() error { _, err := srv.UpdateDoc(ctx, "db", []byte(`{"_id":"n","x":1}`)); return err }, 0},
		{"update bad json", func() error { _, err := srv.UpdateDoc(ctx, "db", []byte(`{`)); return err }, 400},
	}
	for _, tc := range tests {
		err := tc.run()
		if tc.status == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var he *hooks.Error
		if !errors.As(err, &he) || he.Status != tc.status {
			t.Errorf("%s: %v, want status %d", tc.name, err, tc.status)
		}
	}
	doc, err := srv.GetDoc(ctx, "db", "n")
	if err != nil || !strings.Contains(string(doc), `"_id":"n"`) || !strings.Contains(string(doc), `"_rev":"1-`) {
		t.Errorf("GetDoc after UpdateDoc: %s %v", doc, err)
	}
}

func TestFauxtonFiles(t *testing.T) {
	ts, srv := newTestServer(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "index.html"), []byte("<html>fauxton</html>"), 0o644)
	srv.fauxton = dir
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(ts.URL + "/_utils")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 301 || resp.Header.Get("Location") != "/_utils/" {
		t.Errorf("/_utils: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	runSteps(t, ts.URL, []step{{name: "index", method: "GET", path: "/_utils/", user: "-", status: 200, has: []string{"fauxton"}}})
}
