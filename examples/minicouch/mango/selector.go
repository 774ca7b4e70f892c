package mango

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
)

// Selector is a compiled Mango selector, safe for concurrent use.
type Selector struct {
	root node
}

// node matches the value at its position; present is false when the field
// it stands on does not exist in the document.
type node interface {
	match(v any, present bool) bool
}

// Parse compiles a JSON selector. It returns an error naming the offending
// operator or argument when the selector is not valid Mango.
func Parse(raw []byte) (*Selector, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("invalid selector json: %v", err)
	}
	return Compile(v)
}

// Compile compiles an already decoded selector (a JSON object). Its errors
// are CouchDB's sentences, capitals included, as clients see them.
func Compile(v any) (*Selector, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("Selector error: expected a JSON object")
	}
	n, err := parseObject(obj, scope{})
	if err != nil {
		return nil, err
	}
	return &Selector{root: n}, nil
}

// Match reports whether the decoded JSON document doc satisfies the selector.
func (s *Selector) Match(doc any) bool {
	return s.root.match(doc, true)
}

// MatchJSON decodes doc and reports whether it satisfies the selector; a
// document that is not valid JSON never matches.
func (s *Selector) MatchJSON(doc []byte) bool {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return false
	}
	return s.Match(v)
}

// scope is where a part of a selector stands: the field path from the
// selector's root (the whole selector, or an $elemMatch, $allMatch or
// $keyMapMatch argument) and whether its comparisons are raw.
type scope struct {
	path []string
	// raw: under the field _id CouchDB compares values in Erlang's term
	// order (CompareRaw), as its _all_docs index orders ids, not by view
	// collation; so does everything below it.
	raw bool
}

// field is the scope of the sub-field path of s.
func (s scope) field(path []string) scope {
	p := append(append([]string(nil), s.path...), path...)
	return scope{path: p, raw: s.raw || len(p) == 1 && p[0] == "_id"}
}

// parseObject compiles an object whose keys are field names, combinators or
// operators applying to the current value; all of them must hold.
func parseObject(obj map[string]any, sc scope) (node, error) {
	var all andNode
	for _, k := range sortedKeys(obj) {
		arg := obj[k]
		if strings.HasPrefix(k, "$") {
			n, err := parseOperator(k, arg, sc)
			if err != nil {
				return nil, err
			}
			all = append(all, n)
			continue
		}
		path := splitPath(k)
		child, err := parseCondition(arg, sc.field(path))
		if err != nil {
			return nil, err
		}
		all = append(all, fieldNode{path: path, child: child})
	}
	if len(all) == 1 {
		return all[0], nil
	}
	return all, nil
}

// parseCondition compiles the value given for a field: an object of
// operators or sub-fields, or a literal meaning implicit $eq.
func parseCondition(arg any, sc scope) (node, error) {
	if obj, ok := arg.(map[string]any); ok && len(obj) > 0 {
		return parseObject(obj, sc)
	}
	return cmpNode{op: "$eq", arg: arg, raw: sc.raw}, nil
}

func parseSelectorList(op string, arg any, sc scope) ([]node, error) {
	list, ok := arg.([]any)
	if !ok {
		return nil, fmt.Errorf("%s argument must be an array", op)
	}
	nodes := make([]node, 0, len(list))
	for _, item := range list {
		n, err := parseCondition(item, sc)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

func parseOperator(op string, arg any, sc scope) (node, error) {
	switch op {
	case "$and":
		nodes, err := parseSelectorList(op, arg, sc)
		return andNode(nodes), err
	case "$or":
		nodes, err := parseSelectorList(op, arg, sc)
		if err == nil && len(nodes) == 0 {
			return nil, fmt.Errorf("$or argument must be a non-empty array")
		}
		return orNode(nodes), err
	case "$nor":
		nodes, err := parseSelectorList(op, arg, sc)
		return notNode{child: orNode(nodes)}, err
	case "$not":
		child, err := parseCondition(arg, sc)
		return notNode{child: child}, err
	case "$eq", "$ne", "$gt", "$gte", "$lt", "$lte":
		return cmpNode{op: op, arg: arg, raw: sc.raw}, nil
	case "$exists":
		b, ok := arg.(bool)
		if !ok {
			return nil, fmt.Errorf("$exists argument must be a boolean")
		}
		return existsNode(b), nil
	case "$type":
		s, ok := arg.(string)
		switch s {
		case "null", "boolean", "number", "string", "array", "object":
		default:
			ok = false
		}
		if !ok {
			return nil, fmt.Errorf("invalid $type argument: %v", arg)
		}
		return typeNode(s), nil
	case "$in", "$nin", "$all":
		list, ok := arg.([]any)
		if !ok {
			return nil, fmt.Errorf("%s argument must be an array", op)
		}
		return setNode{op: op, args: list, raw: sc.raw}, nil
	case "$size":
		f, ok := arg.(float64)
		if !ok || f != math.Trunc(f) || f < 0 {
			return nil, fmt.Errorf("$size argument must be a non-negative integer")
		}
		return sizeNode(int(f)), nil
	case "$mod":
		list, ok := arg.([]any)
		if !ok || len(list) != 2 {
			return nil, fmt.Errorf("$mod argument must be [divisor, remainder]")
		}
		d, ok1 := list[0].(float64)
		r, ok2 := list[1].(float64)
		if !ok1 || !ok2 || d != math.Trunc(d) || r != math.Trunc(r) || d == 0 {
			return nil, fmt.Errorf("$mod argument must be two integers with a non-zero divisor")
		}
		return modNode{d: int64(d), r: int64(r)}, nil
	case "$regex":
		s, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("$regex argument must be a string")
		}
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("invalid $regex: %v", err)
		}
		return regexNode{re: re}, nil
	case "$beginsWith":
		s, ok := arg.(string)
		if !ok {
			return nil, fmt.Errorf("$beginsWith argument must be a string")
		}
		return prefixNode(s), nil
	case "$elemMatch", "$allMatch", "$keyMapMatch":
		// the argument is a selector of its own: its fields start anew
		child, err := parseCondition(arg, scope{raw: sc.raw})
		if err != nil {
			return nil, err
		}
		return elemNode{op: op, child: child}, nil
	}
	return nil, fmt.Errorf("Invalid operator: %s", op)
}

// SplitField splits a field name into its path as CouchDB does: at each
// dot not preceded by a backslash, every backslash then dropped from the
// parts: a\.b is the field "a.b", \$x the field "$x".
func SplitField(field string) []string { return splitPath(field) }

func splitPath(field string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(field); i++ {
		switch c := field[i]; {
		case c == '\\':
		case c == '.' && (i == 0 || field[i-1] != '\\'):
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, cur.String())
}
