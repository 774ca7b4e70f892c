package couchapi

import (
	"net/http"
	"strings"
)

// Defaults of CouchDB's `[cors]` section.
const (
	corsDefaultMethods = "GET, HEAD, POST, PUT, DELETE, COPY, OPTIONS"
	corsDefaultHeaders = "accept, authorization, content-type, origin, referer, cache-control, x-requested-with, if-match, if-none-match"
	corsExposeHeaders  = "content-type, cache-control, accept-ranges, etag, server, x-couch-request-id, x-couch-update-newrev, x-couchdb-body-time"
)

// corsOrigin returns the value of Access-Control-Allow-Origin for a
// request from origin when `[chttpd] enable_cors` is on and the origin is
// listed in `[cors] origins` ("*" allows any), else "".
func (s *Server) corsOrigin(origin string) string {
	if origin == "" || s.cfg.GetDefault("chttpd", "enable_cors", "false") != "true" {
		return ""
	}
	creds := s.cfg.GetDefault("cors", "credentials", "false") == "true"
	for _, o := range strings.Split(s.cfg.GetDefault("cors", "origins", ""), ",") {
		o = strings.TrimSpace(o)
		switch {
		case o == "*" && !creds:
			return "*"
		case o == "*" || strings.EqualFold(o, origin):
			return origin
		}
	}
	return ""
}

// cors adds CouchDB's CORS headers to w; it answers preflight requests
// itself and reports whether the request is finished.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	allow := s.corsOrigin(r.Header.Get("Origin"))
	if allow == "" {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", allow)
	if allow != "*" {
		h.Add("Vary", "Origin")
	}
	if s.cfg.GetDefault("cors", "credentials", "false") == "true" {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		return false
	}
	methods := s.cfg.GetDefault("cors", "methods", corsDefaultMethods)
	allowed := false
	want := strings.ToUpper(r.Header.Get("Access-Control-Request-Method"))
	for _, m := range strings.Split(methods, ",") {
		allowed = allowed || strings.TrimSpace(strings.ToUpper(m)) == want
	}
	if !allowed {
		h.Del("Access-Control-Allow-Origin")
		h.Del("Access-Control-Allow-Credentials")
		w.WriteHeader(http.StatusOK)
		return true
	}
	h.Set("Access-Control-Allow-Methods", methods)
	headers := s.cfg.GetDefault("cors", "headers", corsDefaultHeaders)
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		known := map[string]bool{}
		for _, k := range strings.Split(headers, ",") {
			known[strings.TrimSpace(strings.ToLower(k))] = true
		}
		var ok []string
		for _, k := range strings.Split(req, ",") {
			if k = strings.TrimSpace(strings.ToLower(k)); known[k] {
				ok = append(ok, k)
			}
		}
		h.Set("Access-Control-Allow-Headers", strings.Join(ok, ", "))
	}
	h.Set("Access-Control-Max-Age", s.cfg.GetDefault("cors", "max_age", "600"))
	w.WriteHeader(http.StatusOK)
	return true
}
