package mango

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/couchepi/couchepi/internal/jsonobj"
)

// Normalize rewrites a selector into the form CouchDB stores for a
// partial index's partial_filter_selector (the view's "map") and shows
// in _index: every implicit equality an explicit $eq, implicit
// conjunctions an explicit $and in the members' order, nested field
// objects joined into dotted names ({"a":{"b":1}} is {"a.b":{"$eq":1}}),
// and negations pushed down to the conditions ({"$not":{"a":{"$gt":1}}}
// is {"a":{"$lte":1}}). Member order is kept throughout.
func Normalize(raw []byte) (json.RawMessage, error) {
	if _, err := Parse(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		return nil, err
	}
	o, ok := v.(object)
	if !ok {
		return nil, fmt.Errorf("Selector error: expected a JSON object")
	}
	if len(o) == 0 {
		return json.RawMessage(`{}`), nil
	}
	n := normNegations(normFields(normOps(o), ""))
	return appendOrdered(nil, n), nil
}

// object is a JSON object with its members in order.
type object []member

type member struct {
	key string
	val any
}

func one(key string, val any) object { return object{{key, val}} }

func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := object{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				o = append(o, member{k.(string), v})
			}
			_, err := dec.Token()
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
	}
	return tok, nil
}

func appendOrdered(buf []byte, v any) []byte {
	switch t := v.(type) {
	case object:
		buf = append(buf, '{')
		for i, m := range t {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = jsonobj.AppendString(buf, m.key)
			buf = append(buf, ':')
			buf = appendOrdered(buf, m.val)
		}
		return append(buf, '}')
	case []any:
		buf = append(buf, '[')
		for i, x := range t {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendOrdered(buf, x)
		}
		return append(buf, ']')
	case string:
		return jsonobj.AppendString(buf, t)
	case json.Number:
		return append(buf, t...)
	case bool:
		if t {
			return append(buf, "true"...)
		}
		return append(buf, "false"...)
	}
	return append(buf, "null"...)
}

func mapList(list any, f func(any) any) []any {
	in, _ := list.([]any)
	out := make([]any, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}

// normOps makes implicit operators explicit.
func normOps(v any) any {
	o, ok := v.(object)
	if !ok {
		return one("$eq", v)
	}
	if len(o) > 1 {
		args := make([]any, len(o))
		for i, m := range o {
			args[i] = normOps(object{m})
		}
		return one("$and", args)
	}
	if len(o) == 0 {
		return one("$eq", o)
	}
	k, arg := o[0].key, o[0].val
	switch k {
	case "$and", "$or", "$nor":
		return one(k, mapList(arg, normOps))
	case "$not", "$elemMatch", "$allMatch", "$keyMapMatch":
		return one(k, normOps(arg))
	}
	if strings.HasPrefix(k, "$") {
		return o
	}
	return one(k, normOps(arg))
}

// normFields joins field names into dotted paths down to the operators.
func normFields(v any, path string) any {
	o, _ := v.(object)
	if len(o) == 0 {
		return o
	}
	k, arg := o[0].key, o[0].val
	switch k {
	case "$and", "$or", "$nor":
		return one(k, mapList(arg, func(a any) any { return normFields(a, path) }))
	case "$not":
		return one(k, normFields(arg, path))
	case "$elemMatch", "$allMatch", "$keyMapMatch":
		return one(path, one(k, normFields(arg, "")))
	}
	if strings.HasPrefix(k, "$") {
		return one(path, o)
	}
	if path != "" {
		k = path + "." + k
	}
	return normFields(arg, k)
}

// normNegations pushes $not and $nor down to the conditions.
func normNegations(v any) any {
	o, _ := v.(object)
	if len(o) == 0 {
		return v
	}
	k, arg := o[0].key, o[0].val
	switch k {
	case "$not":
		return negate(arg)
	case "$nor":
		return one("$and", mapList(arg, negate))
	case "$and", "$or":
		return one(k, mapList(arg, normNegations))
	case "$elemMatch", "$allMatch", "$keyMapMatch":
		return one(k, normNegations(arg))
	}
	return v
}

var negations = map[string]string{"$lt": "$gte", "$lte": "$gt", "$eq": "$ne", "$ne": "$eq",
	"$gte": "$lt", "$gt": "$lte", "$in": "$nin", "$nin": "$in"}

func negate(v any) any {
	o, _ := v.(object)
	if len(o) == 0 {
		return one("$not", v)
	}
	k, arg := o[0].key, o[0].val
	switch k {
	case "$not":
		return normNegations(arg)
	case "$nor":
		return one("$or", mapList(arg, normNegations))
	case "$and":
		return one("$or", mapList(arg, negate))
	case "$or":
		return one("$and", mapList(arg, negate))
	case "$exists":
		b, _ := arg.(bool)
		return one(k, !b)
	}
	if n, ok := negations[k]; ok {
		return one(n, arg)
	}
	if strings.HasPrefix(k, "$") {
		return one("$not", o)
	}
	return one(k, negate(arg))
}
