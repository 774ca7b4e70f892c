package couchapi

import (
	"net/http"
	"net/url"

	"github.com/couchepi/couchepi/hooks"
)

// loginForm is the body of POST /_session: its members in order (JSON or
// form), each name first as it came.
type loginForm []loginField

type loginField struct {
	name  string
	value any // a string, or what JSON held
}

// value returns the first string value of name.
func (f loginForm) value(name string) (string, bool) {
	for _, fd := range f {
		if fd.name == name {
			s, ok := fd.value.(string)
			return s, ok
		}
	}
	return "", false
}

// errSessionCtype is CouchDB's answer to a login body of another type.
var errSessionCtype = &hooks.Error{Status: 415, Err: "bad_content_type",
	Reason: "Content-Type must be 'application/x-www-form-urlencoded' or 'application/json'"}

// readLoginForm reads a login body: a form or a JSON object.
func readLoginForm(r *http.Request) (loginForm, *hooks.Error) {
	mt, _ := mediaType(r)
	switch mt {
	case "application/x-www-form-urlencoded":
		b, herr := readBody(r)
		if herr != nil {
			return nil, herr
		}
		vals, err := url.ParseQuery(string(b))
		if err != nil {
			return nil, badRequest("invalid form")
		}
		var f loginForm
		for k, vs := range vals {
			for _, v := range vs {
				f = append(f, loginField{k, v})
			}
		}
		return f, nil
	case "application/json":
		var m map[string]any
		if herr := readJSONBody(r, &m); herr != nil {
			return nil, herr
		}
		if m == nil {
			return nil, badRequest("Request body must be a JSON object")
		}
		f := make(loginForm, 0, len(m))
		for k, v := range m {
			f = append(f, loginField{k, v})
		}
		return f, nil
	}
	return nil, errSessionCtype
}

// loginName is the user a login names, as `name` or (as CouchDB also
// takes it) `username`; naming two different ones is an error.
func loginName(f loginForm) (string, *hooks.Error) {
	name, hasName := f.value("name")
	username, hasUsername := f.value("username")
	switch {
	case hasName && hasUsername && name != username:
		return "", badRequest("request body contains different usernames")
	case hasName:
		return name, nil
	case hasUsername:
		return username, nil
	}
	return "", badRequest("request body must contain a username")
}

// redirectSession points a _session answer at the query's param (next or
// fail) as CouchDB does, returning 302; else it returns status.
func (s *Server) redirectSession(q *request, param string, status int) int {
	to := q.query(param)
	if to == "" {
		return status
	}
	q.w.Header().Set("Location", absURL(q.r, to))
	return http.StatusFound
}
