package mango

import (
	"encoding/json"

	"github.com/couchepi/couchepi/internal/jsonobj"
	"github.com/couchepi/couchepi/internal/selector"
)

// Normalize rewrites a selector into the form CouchDB stores for a
// partial index's partial_filter_selector (the view's "map") and shows
// in _index: every implicit equality an explicit $eq, implicit
// conjunctions an explicit $and in the members' order, nested field
// objects joined into dotted names ({"a":{"b":1}} is {"a.b":{"$eq":1}}),
// and negations pushed down to the conditions ({"$not":{"a":{"$gt":1}}}
// is {"a":{"$lte":1}}). Member order is kept throughout. The selector
// must compile (Parse) and pass CouchDB's normaliser, which the
// replicator shares (internal/selector).
func Normalize(raw []byte) (json.RawMessage, error) {
	if _, err := Parse(raw); err != nil {
		return nil, err
	}
	v, err := selector.Normalize(raw)
	if err != nil {
		return nil, err
	}
	return jsonobj.AppendOrdered(nil, v), nil
}
