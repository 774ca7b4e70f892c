// Package selector validates and normalises CouchDB Mango selectors as
// CouchDB's mango_selector:normalize/1 does: operators made explicit (a
// bare value means $eq, several members mean $and), nested field names
// joined with ".", negations pushed down to the conditions. The
// replicator's parser hashes the normal form (sorted) into replication
// ids; minicouch stores it for a partial index. Values are jsonobj's
// ordered ones. Errors are readable sentences rather than CouchDB's
// printed Erlang terms.
package selector

import (
	"encoding/json"
	"errors"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

var errBadField = errors.New("invalid field")

func badArg(op string) error { return errors.New("bad argument for operator `" + op + "`") }

// Normalize validates the JSON selector raw and returns its normal form,
// members in the order given (Sort orders them).
func Normalize(raw []byte) (any, error) {
	v, err := jsonobj.DecodeOrdered(raw)
	if err != nil {
		return nil, errors.New("not valid JSON")
	}
	o, ok := v.(jsonobj.Ordered)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	if len(o) == 0 {
		return jsonobj.Ordered{}, nil
	}
	if v, err = normOps(o); err != nil {
		return nil, err
	}
	if v, err = normFields(v, ""); err != nil {
		return nil, err
	}
	if v, err = normNegations(v); err != nil {
		return nil, err
	}
	if top, ok := v.(jsonobj.Ordered); ok {
		for _, m := range top {
			if m.Key == "" {
				return nil, errors.New("missing field name")
			}
		}
	}
	return v, nil
}

// Sort sorts every object's members by key, recursively (arrays keep
// their order). Members with equal keys end up in reverse document order,
// as in CouchDB's couch_replicator_filters:ejsort/1.
func Sort(v any) any {
	switch t := v.(type) {
	case jsonobj.Ordered:
		out := make(jsonobj.Ordered, len(t))
		for i, m := range t {
			out[len(t)-1-i] = jsonobj.OrderedMember{Key: m.Key, Value: Sort(m.Value)}
		}
		slices.SortStableFunc(out, func(a, b jsonobj.OrderedMember) int { return strings.Compare(a.Key, b.Key) })
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = Sort(e)
		}
		return out
	}
	return v
}

// checkRegex refuses a `$regex` the selector evaluator cannot compile,
// as CouchDB's normaliser refuses one re:compile rejects. The evaluator
// that runs it (minicouch's, when the source is a minicouch) is Go's
// regexp, so its syntax (RE2) is the one checked: a PCRE-only construct
// such as a lookahead is refused too, not left to fail every run.
func checkRegex(expr string) error {
	if _, err := regexp.Compile(expr); err != nil {
		detail := err.Error()
		var se *syntax.Error
		if errors.As(err, &se) {
			detail = se.Code.String()
		}
		return errors.New("`$regex` " + quoteArg(expr) + " is not a valid regular expression: " + detail)
	}
	return nil
}

// quoteArg quotes a user's text for a reason as a JSON string, cut to 100
// bytes so that a huge argument does not make a huge reason.
func quoteArg(s string) string {
	const max = 100
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return string(jsonobj.AppendString(nil, s))
}

// single returns the only member of a one-member object.
func single(v any) (jsonobj.OrderedMember, bool) {
	if o, ok := v.(jsonobj.Ordered); ok && len(o) == 1 {
		return o[0], true
	}
	return jsonobj.OrderedMember{}, false
}

func obj1(k string, v any) jsonobj.Ordered { return jsonobj.Ordered{{Key: k, Value: v}} }

func isInteger(v any) bool {
	n, ok := v.(json.Number)
	return ok && !strings.ContainsAny(n.String(), ".eE")
}

// normOps validates operators and makes implicit ones explicit.
func normOps(v any) (any, error) {
	if o, ok := v.(jsonobj.Ordered); ok && len(o) > 1 {
		args := make([]any, 0, len(o))
		for _, m := range o {
			a, err := normOps(jsonobj.Ordered{m})
			if err != nil {
				return nil, err
			}
			args = append(args, a)
		}
		return obj1("$and", args), nil
	}
	f, ok := single(v)
	if !ok {
		return obj1("$eq", v), nil // a bare value (or {}) means equality
	}
	arg := f.Value
	switch f.Key {
	case "$and", "$or", "$nor":
		list, ok := arg.([]any)
		if !ok {
			return nil, badArg(f.Key)
		}
		out := make([]any, len(list))
		for i, a := range list {
			var err error
			if out[i], err = normOps(a); err != nil {
				return nil, err
			}
		}
		return obj1(f.Key, out), nil
	case "$not", "$elemMatch", "$allMatch", "$keyMapMatch":
		if _, ok := arg.(jsonobj.Ordered); !ok {
			return nil, badArg(f.Key)
		}
		a, err := normOps(arg)
		if err != nil {
			return nil, err
		}
		return obj1(f.Key, a), nil
	case "$in", "$nin", "$all":
		if _, ok := arg.([]any); !ok {
			return nil, badArg(f.Key)
		}
		return v, nil
	case "$exists":
		if _, ok := arg.(bool); !ok {
			return nil, badArg(f.Key)
		}
		return v, nil
	case "$type", "$beginsWith":
		if _, ok := arg.(string); !ok {
			return nil, badArg(f.Key)
		}
		return v, nil
	case "$regex":
		s, ok := arg.(string)
		if !ok {
			return nil, badArg(f.Key)
		}
		if err := checkRegex(s); err != nil {
			return nil, err
		}
		return v, nil
	case "$mod":
		l, ok := arg.([]any)
		if !ok || len(l) != 2 || !isInteger(l[0]) || !isInteger(l[1]) || strings.TrimLeft(l[0].(json.Number).String(), "-0") == "" {
			return nil, badArg(f.Key)
		}
		return v, nil
	case "$size":
		if !isInteger(arg) || strings.HasPrefix(arg.(json.Number).String(), "-") {
			return nil, badArg(f.Key)
		}
		return v, nil
	case "$text":
		switch arg.(type) {
		case string, json.Number, bool:
			return obj1("$default", obj1("$text", arg)), nil
		}
		return nil, badArg(f.Key)
	case "$default", "$lt", "$lte", "$eq", "$ne", "$gte", "$gt":
		return v, nil
	case "$where", "$geoWithin", "$geoIntersects", "$near", "$nearSphere":
		return nil, errors.New("operator `" + f.Key + "` is not supported")
	}
	if strings.HasPrefix(f.Key, "$") {
		return nil, errors.New("unknown operator `" + f.Key + "`")
	}
	c, err := normOps(arg)
	if err != nil {
		return nil, err
	}
	return obj1(f.Key, c), nil
}

// normFields pushes field names down to the terminal operators, joining
// nested names with ".".
func normFields(v any, path string) (any, error) {
	f, ok := single(v)
	if !ok {
		return nil, errBadField
	}
	switch f.Key {
	case "$and", "$or", "$nor":
		list, _ := f.Value.([]any)
		out := make([]any, len(list))
		for i, a := range list {
			var err error
			if out[i], err = normFields(a, path); err != nil {
				return nil, err
			}
		}
		return obj1(f.Key, out), nil
	case "$not":
		a, err := normFields(f.Value, path)
		if err != nil {
			return nil, err
		}
		return obj1("$not", a), nil
	case "$elemMatch", "$allMatch", "$keyMapMatch":
		var a any = jsonobj.Ordered{}
		if o, _ := f.Value.(jsonobj.Ordered); len(o) > 0 {
			var err error
			if a, err = normFields(f.Value, ""); err != nil {
				return nil, err
			}
		}
		return obj1(path, obj1(f.Key, a)), nil
	case "$default":
		if _, ok := single(f.Value); ok && path == "" && f.Value.(jsonobj.Ordered)[0].Key == "$text" {
			return v, nil
		}
		return nil, errBadField
	}
	if strings.HasPrefix(f.Key, "$") {
		return obj1(path, v), nil
	}
	if path == "" {
		return normFields(f.Value, f.Key)
	}
	return normFields(f.Value, path+"."+f.Key)
}

// normNegations moves `$not`/`$nor` as far down the tree as possible.
func normNegations(v any) (any, error) {
	f, ok := single(v)
	if !ok {
		return v, nil
	}
	switch f.Key {
	case "$not":
		return negate(f.Value)
	case "$nor":
		return mapList("$and", f.Value, negate)
	case "$and", "$or":
		return mapList(f.Key, f.Value, normNegations)
	case "$elemMatch", "$allMatch", "$keyMapMatch":
		a, err := normNegations(f.Value)
		if err != nil {
			return nil, err
		}
		return obj1(f.Key, a), nil
	}
	return v, nil
}

// negated maps comparison operators to their negation.
var negated = map[string]string{
	"$lt": "$gte", "$lte": "$gt", "$eq": "$ne", "$ne": "$eq",
	"$gte": "$lt", "$gt": "$lte", "$in": "$nin", "$nin": "$in",
}

// negate applies a negation to an expression (De Morgan for $and/$or).
func negate(v any) (any, error) {
	f, ok := single(v)
	if !ok {
		return nil, badArg("$not")
	}
	switch f.Key {
	case "$not":
		return normNegations(f.Value)
	case "$nor":
		return mapList("$or", f.Value, normNegations)
	case "$and":
		return mapList("$or", f.Value, negate)
	case "$or":
		return mapList("$and", f.Value, negate)
	case "$default":
		return nil, badArg("$not")
	case "$exists":
		b, _ := f.Value.(bool)
		return obj1("$exists", !b), nil
	}
	if op, ok := negated[f.Key]; ok {
		return obj1(op, f.Value), nil
	}
	if strings.HasPrefix(f.Key, "$") {
		return obj1("$not", v), nil
	}
	c, err := negate(f.Value)
	if err != nil {
		return nil, err
	}
	return obj1(f.Key, c), nil
}

func mapList(op string, arg any, fn func(any) (any, error)) (any, error) {
	list, _ := arg.([]any)
	out := make([]any, len(list))
	for i, a := range list {
		var err error
		if out[i], err = fn(a); err != nil {
			return nil, err
		}
	}
	return obj1(op, out), nil
}
