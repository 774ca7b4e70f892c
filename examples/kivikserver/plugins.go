package main

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/host"
)

// pluginAdmin serves what x/server has no place for: GET
// /_node/_local/_plugins (the loaded plugins) and POST
// /_node/_local/_plugins/{name}/_reload ({"path","sha256"}: swap a plugin
// while the server runs), for server admins, as minicouch does. Other
// requests go to next.
type pluginAdmin struct {
	host *host.Host
	user func(*http.Request) hooks.UserCtx
	next http.Handler
}

func (p *pluginAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/_node/_local/_plugins")
	if !ok || rest != "" && !strings.HasPrefix(rest, "/") {
		p.next.ServeHTTP(w, r)
		return
	}
	if !p.user(r).IsAdmin() {
		hooks.WriteError(w, &hooks.Error{Status: 401, Err: "unauthorized", Reason: "You are not a server admin."})
		return
	}
	if rest == "" {
		if r.Method != http.MethodGet {
			hooks.WriteError(w, &hooks.Error{Status: 405, Err: "method_not_allowed", Reason: "Only GET allowed"})
			return
		}
		out := []map[string]any{}
		for _, st := range p.host.Plugins() {
			out = append(out, pluginJSON(st))
		}
		hooks.WriteJSON(w, http.StatusOK, out)
		return
	}
	name, ok := strings.CutSuffix(strings.TrimPrefix(rest, "/"), "/_reload")
	if !ok || strings.Contains(name, "/") || r.Method != http.MethodPost {
		hooks.WriteError(w, hooks.NotFound("missing"))
		return
	}
	var spec struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
			hooks.WriteError(w, &hooks.Error{Status: 400, Err: "bad_request", Reason: "invalid UTF-8 JSON"})
			return
		}
	}
	if err := p.host.Reload(r.Context(), name, host.Spec{Path: spec.Path, SHA256: spec.SHA256}); err != nil {
		hooks.WriteError(w, &hooks.Error{Status: 500, Err: "reload_failed", Reason: err.Error()})
		return
	}
	for _, st := range p.host.Plugins() {
		if st.Name == name {
			hooks.WriteJSON(w, http.StatusOK, map[string]any{"ok": true, "plugin": pluginJSON(st)})
			return
		}
	}
	hooks.WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// pluginJSON is one plugin as minicouch's _plugins shows it.
func pluginJSON(st host.PluginStatus) map[string]any {
	return map[string]any{"name": st.Name, "version": st.Version, "path": st.Path, "sha256": st.SHA256, "pid": st.PID, "state": st.State}
}
