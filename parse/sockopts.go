package parse

import (
	"strings"
)

// socketOption is one `{name, value}` entry of CouchDB's `socket_options`
// Erlang-term string, e.g. {Name: "keepalive", Value: "true"} or
// {Name: "sndbuf", Value: "10000"}.
type socketOption struct {
	Name  string
	Value string
}

// validSocketOptions are the option names CouchDB keeps; others are dropped.
var validSocketOptions = map[string]bool{
	"buffer": true, "keepalive": true, "nodelay": true,
	"priority": true, "recbuf": true, "sndbuf": true,
}

// parseSocketOptions reads a `socket_options` string such as
// "[{keepalive, true}, {nodelay, false}]". Unknown option names are dropped
// and a string that is not a list of {atom, atom|integer} tuples yields no
// options, as in CouchDB.
func parseSocketOptions(s string) []socketOption {
	p := termScanner{s: s}
	var out []socketOption
	if !p.eat('[') {
		return nil
	}
	if p.eat(']') {
		return p.end(out)
	}
	for {
		if !p.eat('{') {
			return nil
		}
		name, ok := p.atom()
		if !ok || !p.eat(',') {
			return nil
		}
		val, ok := p.atom()
		if !ok {
			if val, ok = p.integer(); !ok {
				return nil
			}
		}
		if !p.eat('}') {
			return nil
		}
		if validSocketOptions[name] {
			out = append(out, socketOption{Name: name, Value: val})
		}
		if p.eat(']') {
			return p.end(out)
		}
		if !p.eat(',') {
			return nil
		}
	}
}

// formatSocketOptions writes options back in CouchDB's term syntax.
func formatSocketOptions(opts []socketOption) string {
	parts := make([]string, len(opts))
	for i, o := range opts {
		parts[i] = "{" + o.Name + ", " + o.Value + "}"
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// termScanner is a tiny scanner for the Erlang-term subset above.
type termScanner struct {
	s string
	i int
}

func (p *termScanner) skip() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *termScanner) eat(c byte) bool {
	p.skip()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *termScanner) end(out []socketOption) []socketOption {
	p.eat('.') // a trailing full stop is allowed
	p.skip()
	if p.i != len(p.s) {
		return nil
	}
	if out == nil {
		out = []socketOption{}
	}
	return out
}

func (p *termScanner) atom() (string, bool) {
	p.skip()
	j := p.i
	if j >= len(p.s) || p.s[j] < 'a' || p.s[j] > 'z' {
		return "", false
	}
	for j < len(p.s) {
		c := p.s[j]
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '@' {
			j++
			continue
		}
		break
	}
	a := p.s[p.i:j]
	p.i = j
	return a, true
}

func (p *termScanner) integer() (string, bool) {
	p.skip()
	j := p.i
	if j < len(p.s) && (p.s[j] == '-' || p.s[j] == '+') {
		j++
	}
	k := j
	for k < len(p.s) && p.s[k] >= '0' && p.s[k] <= '9' {
		k++
	}
	if k == j || k-j > 18 {
		return "", false
	}
	n := p.s[p.i:k]
	p.i = k
	return strings.TrimPrefix(n, "+"), true
}
