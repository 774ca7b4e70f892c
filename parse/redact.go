package parse

import (
	"bytes"
	"encoding/json"
	"strings"
)

// redactedPassword replaces passwords in URLs and basic credentials.
const redactedPassword = "*****"

// redactedHeader replaces Authorization header values.
const redactedHeader = "****"

// Redacted returns a deep copy of r safe to log or show: basic passwords
// and passwords in URLs and proxy URLs become "*****", Authorization and
// Cookie header values become "****", and every string inside other auth
// plugin settings (AuthOther) becomes "*****" (they may hold secrets).
func (r *Rep) Redacted() *Rep {
	c := r.Clone()
	for _, e := range []*Endpoint{&c.Source, &c.Target} {
		e.URL = RedactURL(e.URL)
		e.Proxy = RedactURL(e.Proxy)
		if e.Auth != nil && e.Auth.Password != "" {
			e.Auth.Password = redactedPassword
		}
		for k := range e.Headers {
			if strings.EqualFold(k, "authorization") || strings.EqualFold(k, "cookie") {
				e.Headers[k] = redactedHeader
			}
		}
		if len(e.AuthOther) > 0 {
			e.AuthOther = redactJSONSecrets(e.AuthOther)
		}
	}
	return c
}

// redactJSONSecrets replaces every string value inside a JSON value with
// "*****", keeping the shape (which auth plugins are configured) visible.
func redactJSONSecrets(raw json.RawMessage) json.RawMessage {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil
	}
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case string:
			return redactedPassword
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		}
		return x
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return nil
	}
	return out
}
