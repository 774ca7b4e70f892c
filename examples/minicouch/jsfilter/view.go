package jsfilter

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dop251/goja"
)

// Emit is one row a map function emitted.
type Emit struct {
	Key   any
	Value any
}

// Mapper runs a view's map function. Not safe for concurrent use.
type Mapper struct {
	vm      *goja.Runtime
	fn      goja.Callable
	emits   []Emit
	Timeout time.Duration
}

// NewMapper compiles a `views.<name>.map` function.
func NewMapper(src string) (*Mapper, error) {
	vm := goja.New()
	installLog(vm)
	m := &Mapper{vm: vm, Timeout: DefaultTimeout}
	emit := func(call goja.FunctionCall) goja.Value {
		m.emits = append(m.emits, Emit{Key: exportJSON(vm, call.Argument(0)), Value: exportJSON(vm, call.Argument(1))})
		return goja.Undefined()
	}
	if err := vm.Set("emit", emit); err != nil {
		return nil, err
	}
	if err := vm.Set("sum", func(call goja.FunctionCall) goja.Value {
		total := 0.0
		if arr, ok := call.Argument(0).Export().([]any); ok {
			for _, v := range arr {
				f, _ := toFloat(v)
				total += f
			}
		}
		return vm.ToValue(total)
	}); err != nil {
		return nil, err
	}
	fn, err := compileFunc(vm, src)
	if err != nil {
		return nil, err
	}
	m.fn = fn
	return m, nil
}

// exportJSON converts a JS value to its JSON-decoded Go form (undefined
// becomes nil, as CouchDB maps it to null).
func exportJSON(vm *goja.Runtime, v goja.Value) any {
	if v == nil || goja.IsUndefined(v) || goja.IsNull(v) {
		return nil
	}
	stringify, ok := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("stringify"))
	if !ok {
		return nil
	}
	s, err := stringify(goja.Undefined(), v)
	if err != nil || goja.IsUndefined(s) {
		return nil
	}
	var out any
	_ = json.Unmarshal([]byte(s.String()), &out)
	return out
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case int:
		return float64(x), true
	}
	return 0, false
}

// Map runs the function on one doc (JSON) and returns what it emitted.
func (m *Mapper) Map(doc []byte) ([]Emit, error) {
	dv, err := parseJSON(m.vm, doc)
	if err != nil {
		return nil, err
	}
	m.emits = nil
	timer := time.AfterFunc(m.Timeout, func() { m.vm.Interrupt("os_process_timeout") })
	defer func() {
		timer.Stop()
		m.vm.ClearInterrupt()
	}()
	if _, err := m.fn(goja.Undefined(), dv); err != nil {
		return nil, err
	}
	return m.emits, nil
}

// Reduce runs a JavaScript reduce function (keys are [key, id] pairs) in the
// mapper's runtime.
func (m *Mapper) Reduce(src string, keys [][2]any, values []any, rereduce bool) (any, error) {
	fn, err := compileFunc(m.vm, src)
	if err != nil {
		return nil, err
	}
	kb, _ := json.Marshal(keys)
	vb, _ := json.Marshal(values)
	if keys == nil {
		kb = []byte("null")
	}
	kv, err := parseJSON(m.vm, kb)
	if err != nil {
		return nil, err
	}
	vv, err := parseJSON(m.vm, vb)
	if err != nil {
		return nil, err
	}
	timer := time.AfterFunc(m.Timeout, func() { m.vm.Interrupt("os_process_timeout") })
	defer func() {
		timer.Stop()
		m.vm.ClearInterrupt()
	}()
	res, err := fn(goja.Undefined(), kv, vv, m.vm.ToValue(rereduce))
	if err != nil {
		return nil, fmt.Errorf("reduce: %w", err)
	}
	return exportJSON(m.vm, res), nil
}
