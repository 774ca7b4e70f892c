package couchapi

import (
	"bytes"
	"errors"
	"runtime"
	"runtime/debug"

	"github.com/couchepi/couchepi/examples/minicouch/auth"
	"github.com/couchepi/couchepi/hooks"
	"github.com/couchepi/couchepi/host"
	"github.com/couchepi/couchepi/internal/jsonobj"
)

var errUnknownConfig = &hooks.Error{Status: 404, Err: "not_found", Reason: "unknown_config_value"}

// handleNode serves `/_node/{_local|nonode@nohost}/…`: _config and _plugins.
func (s *Server) handleNode(q *request) {
	if len(q.segs) < 2 || (q.segs[1] != "_local" && q.segs[1] != s.node) {
		writeError(q.w, &hooks.Error{Status: 404, Err: "not_found", Reason: "missing"})
		return
	}
	if len(q.segs) == 2 {
		s.only(q, "GET,HEAD", func() { writeJSON(q.w, 200, map[string]string{"name": s.node}) })
		return
	}
	if err := auth.CheckServerAdmin(q.user); err != nil {
		writeError(q.w, err)
		return
	}
	switch q.segs[2] {
	case "_versions":
		s.only(q, "GET,HEAD", func() { writeJSON(q.w, 200, versions()) })
	case "_config":
		s.handleConfig(q, q.segs[3:])
	case "_plugins":
		s.handlePlugins(q, q.segs[3:])
	case "_prometheus":
		s.only(q, "GET,HEAD", func() { s.handlePrometheus(q) })
	case "_stats":
		s.only(q, "GET,HEAD", func() { s.handleStats(q, q.segs[3:]) })
	case "_system":
		s.only(q, "GET,HEAD", func() { writeRawJSON(q.w, 200, []byte(`{}`)) })
	default:
		writeError(q.w, &hooks.Error{Status: 404, Err: "not_found", Reason: "missing"})
	}
}

// handleConfig is `/_node/_local/_config[/section[/key]]`.
func (s *Server) handleConfig(q *request, rest []string) {
	switch len(rest) {
	case 0:
		s.only(q, "GET,HEAD", func() { writeJSON(q.w, 200, s.cfg.All()) })
	case 1:
		s.only(q, "GET,HEAD", func() {
			sec, ok := s.cfg.Section(rest[0])
			if !ok {
				sec = map[string]string{}
			}
			writeJSON(q.w, 200, sec)
		})
	case 2:
		section, key := rest[0], rest[1]
		switch q.r.Method {
		case "GET", "HEAD":
			v, ok := s.cfg.Get(section, key)
			if !ok {
				writeError(q.w, errUnknownConfig)
				return
			}
			writeJSON(q.w, 200, v)
		case "PUT":
			var v string
			if herr := readJSONBody(q.r, &v); herr != nil {
				writeError(q.w, herr)
				return
			}
			if section == "admins" && !auth.IsHashedAdmin(v) {
				h, err := auth.HashAdminPassword(v, s.cfg.GetDefault("chttpd_auth", "pbkdf2_prf", "sha256"), auth.Iterations(s.cfg))
				if err != nil {
					writeError(q.w, err)
					return
				}
				v = h
			}
			old, _, err := s.cfg.Set(section, key, v)
			if err != nil {
				writeError(q.w, err)
				return
			}
			s.log.Info("config changed", "section", section, "key", key)
			s.pushConfig(q)
			writeJSON(q.w, 200, old)
		case "DELETE":
			old, ok, err := s.cfg.Delete(section, key)
			if err != nil {
				writeError(q.w, err)
				return
			}
			if !ok {
				writeError(q.w, errUnknownConfig)
				return
			}
			s.log.Info("config deleted", "section", section, "key", key)
			s.pushConfig(q)
			writeJSON(q.w, 200, old)
		default:
			writeError(q.w, methodNotAllowed("GET,PUT,DELETE"))
		}
	default:
		writeError(q.w, errUnknownConfig)
	}
}

// pushConfig hands the changed configuration to the plugins.
func (s *Server) pushConfig(q *request) {
	if s.hooks != nil {
		s.hooks.SetConfig(q.ctx(), s.cfg.All())
	}
}

// pluginJSON is one entry of `GET /_node/_local/_plugins`.
type pluginJSON struct {
	Name    string     `json:"name"`
	Version string     `json:"version"`
	Path    string     `json:"path"`
	SHA256  string     `json:"sha256"`
	PID     int        `json:"pid"`
	State   host.State `json:"state"`
}

// handlePlugins is `GET /_node/_local/_plugins` (the loaded plugins),
// `POST /_node/_local/_plugins` (load one more, {"path","sha256"}) and
// `POST /_node/_local/_plugins/{name}/_reload` (swap one, same body; an
// empty body restarts it from its current binary).
func (s *Server) handlePlugins(q *request, rest []string) {
	if len(rest) == 0 {
		switch q.r.Method {
		case "GET", "HEAD":
			out := []pluginJSON{}
			if s.hooks != nil {
				for _, p := range s.hooks.Plugins() {
					out = append(out, pluginJSON{p.Name, p.Version, p.Path, p.SHA256, p.PID, p.State})
				}
			}
			writeJSON(q.w, 200, out)
		case "POST":
			s.loadPlugin(q)
		default:
			writeError(q.w, methodNotAllowed("GET,HEAD,POST"))
		}
		return
	}
	if len(rest) != 2 || rest[1] != "_reload" {
		writeError(q.w, &hooks.Error{Status: 404, Err: "not_found", Reason: "missing"})
		return
	}
	if q.r.Method != "POST" {
		writeError(q.w, methodNotAllowed("POST"))
		return
	}
	spec, herr := readPluginSpec(q)
	if herr != nil {
		writeError(q.w, herr)
		return
	}
	if s.pluginStatus(rest[0]) == nil {
		writeError(q.w, &hooks.Error{Status: 404, Err: "not_found", Reason: "no such plugin"})
		return
	}
	if err := s.hooks.Reload(q.ctx(), rest[0], spec); err != nil {
		writeError(q.w, &hooks.Error{Status: 500, Err: "reload_failed", Reason: err.Error()})
		return
	}
	s.log.Info("plugin reloaded", "plugin", rest[0])
	s.writePluginStatus(q, 200, rest[0])
}

// loadPlugin starts one more plugin while the server runs.
func (s *Server) loadPlugin(q *request) {
	spec, herr := readPluginSpec(q)
	if herr != nil {
		writeError(q.w, herr)
		return
	}
	if spec.Path == "" {
		writeError(q.w, badRequest("`path` names the plugin binary to load"))
		return
	}
	if s.hooks == nil {
		writeError(q.w, &hooks.Error{Status: 500, Err: "load_failed", Reason: "this server has no plugin host"})
		return
	}
	before := map[string]bool{}
	for _, p := range s.hooks.Plugins() {
		before[p.Name] = true
	}
	if err := s.hooks.Load(q.ctx(), spec); err != nil {
		if errors.Is(err, host.ErrAlreadyLoaded) {
			writeError(q.w, &hooks.Error{Status: 409, Err: "conflict", Reason: err.Error() + "; reload it with POST /_node/_local/_plugins/{name}/_reload"})
			return
		}
		writeError(q.w, &hooks.Error{Status: 500, Err: "load_failed", Reason: err.Error()})
		return
	}
	for _, p := range s.hooks.Plugins() {
		if !before[p.Name] {
			s.log.Info("plugin loaded", "plugin", p.Name, "path", p.Path)
			s.writePluginStatus(q, 201, p.Name)
			return
		}
	}
	writeJSON(q.w, 201, okJSON)
}

// readPluginSpec reads the {"path","sha256"} body of a load or reload; an
// empty body is the zero Spec.
func readPluginSpec(q *request) (host.Spec, *hooks.Error) {
	var spec struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	}
	b, herr := readBody(q.r)
	if herr != nil {
		return host.Spec{}, herr
	}
	if len(bytes.TrimSpace(b)) > 0 {
		if herr := decodeJSON(b, &spec); herr != nil {
			return host.Spec{}, herr
		}
	}
	return host.Spec{Path: spec.Path, SHA256: spec.SHA256}, nil
}

// pluginStatus returns the loaded plugin named name, or nil.
func (s *Server) pluginStatus(name string) *host.PluginStatus {
	if s.hooks == nil {
		return nil
	}
	for _, p := range s.hooks.Plugins() {
		if p.Name == name {
			return &p
		}
	}
	return nil
}

// writePluginStatus answers {"ok":true,"plugin":{…}} for plugin name.
func (s *Server) writePluginStatus(q *request, status int, name string) {
	var out any = okJSON
	if p := s.pluginStatus(name); p != nil {
		out = map[string]any{"ok": true, "plugin": pluginJSON{p.Name, p.Version, p.Path, p.SHA256, p.PID, p.State}}
	}
	raw, _ := jsonobj.Marshal(out)
	writeRawJSON(q.w, status, raw)
}

// versions is GET /_node/_local/_versions: CouchDB names its JavaScript
// engine, Erlang and ICU; minicouch names goja, Go and its own collation.
func versions() map[string]any {
	goja := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/dop251/goja" {
				goja = m.Version
			}
		}
	}
	return map[string]any{
		"javascript_engine": map[string]string{"name": "goja", "version": goja},
		"go":                map[string]string{"version": runtime.Version()},
		"collation_driver":  map[string]string{"name": "minicouch", "library_version": "1", "collator_version": "1", "collation_algorithm_version": "1"},
	}
}
