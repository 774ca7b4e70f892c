package mango

import (
	"math"
	"regexp"
	"strings"
)

// andNode holds when every child holds.
type andNode []node

func (n andNode) match(v any, present bool) bool {
	for _, c := range n {
		if !c.match(v, present) {
			return false
		}
	}
	return true
}

// orNode holds when any child holds.
type orNode []node

func (n orNode) match(v any, present bool) bool {
	for _, c := range n {
		if c.match(v, present) {
			return true
		}
	}
	return false
}

// notNode negates its child; a missing field therefore matches $not.
type notNode struct{ child node }

func (n notNode) match(v any, present bool) bool { return !n.child.match(v, present) }

// fieldNode descends into a (possibly nested) field of an object.
type fieldNode struct {
	path  []string
	child node
}

func (n fieldNode) match(v any, present bool) bool {
	for _, p := range n.path {
		obj, ok := v.(map[string]any)
		if !present || !ok {
			return n.child.match(nil, false)
		}
		v, present = obj[p]
	}
	return n.child.match(v, present)
}

// cmpNode is one of $eq $ne $gt $gte $lt $lte under CouchDB collation
// (raw: in Erlang's term order, as for _id).
type cmpNode struct {
	op  string
	arg any
	raw bool
}

func (n cmpNode) match(v any, present bool) bool {
	if !present {
		return false
	}
	c := compare(v, n.arg, n.raw)
	switch n.op {
	case "$eq":
		return c == 0
	case "$ne":
		return c != 0
	case "$gt":
		return c > 0
	case "$gte":
		return c >= 0
	case "$lt":
		return c < 0
	case "$lte":
		return c <= 0
	}
	return false
}

// existsNode is $exists.
type existsNode bool

func (n existsNode) match(_ any, present bool) bool { return present == bool(n) }

// typeNode is $type.
type typeNode string

func (n typeNode) match(v any, present bool) bool {
	if !present {
		return false
	}
	var t string
	switch v.(type) {
	case nil:
		t = "null"
	case bool:
		t = "boolean"
	case float64:
		t = "number"
	case string:
		t = "string"
	case []any:
		t = "array"
	case map[string]any:
		t = "object"
	}
	return t == string(n)
}

// setNode is $in, $nin or $all.
type setNode struct {
	op   string
	args []any
	raw  bool
}

func contains(list []any, v any, raw bool) bool {
	for _, x := range list {
		if compare(x, v, raw) == 0 {
			return true
		}
	}
	return false
}

func (n setNode) match(v any, present bool) bool {
	if !present {
		return false
	}
	values, isList := v.([]any)
	switch n.op {
	case "$in":
		if isList {
			for _, x := range values {
				if contains(n.args, x, n.raw) {
					return true
				}
			}
			return false
		}
		return contains(n.args, v, n.raw)
	case "$nin":
		if isList {
			for _, x := range values {
				if contains(n.args, x, n.raw) {
					return false
				}
			}
			return true
		}
		return !contains(n.args, v, n.raw)
	case "$all":
		if !isList || len(n.args) == 0 {
			return false
		}
		if len(n.args) == 1 {
			if inner, ok := n.args[0].([]any); ok && compare(inner, values, n.raw) == 0 {
				return true
			}
		}
		for _, a := range n.args {
			if !contains(values, a, n.raw) {
				return false
			}
		}
		return true
	}
	return false
}

// sizeNode is $size.
type sizeNode int

func (n sizeNode) match(v any, present bool) bool {
	list, ok := v.([]any)
	return present && ok && len(list) == int(n)
}

// modNode is $mod: the value must be an integer.
type modNode struct{ d, r int64 }

func (n modNode) match(v any, present bool) bool {
	f, ok := v.(float64)
	if !present || !ok || f != math.Trunc(f) {
		return false
	}
	return int64(f)%n.d == n.r
}

// regexNode is $regex on string values.
type regexNode struct{ re *regexp.Regexp }

func (n regexNode) match(v any, present bool) bool {
	s, ok := v.(string)
	return present && ok && n.re.MatchString(s)
}

// prefixNode is $beginsWith on string values.
type prefixNode string

func (n prefixNode) match(v any, present bool) bool {
	s, ok := v.(string)
	return present && ok && strings.HasPrefix(s, string(n))
}

// elemNode is $elemMatch, $allMatch (arrays) or $keyMapMatch (object keys).
type elemNode struct {
	op    string
	child node
}

func (n elemNode) match(v any, present bool) bool {
	if !present {
		return false
	}
	switch n.op {
	case "$elemMatch", "$allMatch":
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return false
		}
		for _, x := range list {
			m := n.child.match(x, true)
			if n.op == "$elemMatch" && m {
				return true
			}
			if n.op == "$allMatch" && !m {
				return false
			}
		}
		return n.op == "$allMatch"
	case "$keyMapMatch":
		obj, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for k := range obj {
			if n.child.match(k, true) {
				return true
			}
		}
	}
	return false
}
