// Package jsfilter runs CouchDB design-doc JavaScript for `_changes`
// filtering in goja: `filters.<name>` as function(doc, req), and the `_view`
// filter, where a doc passes when `views.<name>.map` emits for it.
package jsfilter

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dop251/goja"
)

// DefaultTimeout bounds the run time of one filter call, like CouchDB's
// `[couchdb] os_process_timeout`.
const DefaultTimeout = 5 * time.Second

// Filter is a compiled filter function bound to one request. It is not safe
// for concurrent use (goja runtimes are single-threaded): compile one per
// request.
type Filter struct {
	vm      *goja.Runtime
	fn      goja.Callable
	req     goja.Value
	emitted bool
	view    bool
	Timeout time.Duration
}

// Request is the `req` object handed to a filter function.
type Request struct {
	Query   map[string]string `json:"query"`
	UserCtx json.RawMessage   `json:"userCtx"`
	Method  string            `json:"method"`
	Path    []string          `json:"path"`
	Body    json.RawMessage   `json:"body,omitempty"`
	Info    json.RawMessage   `json:"info,omitempty"`
}

func compileFunc(vm *goja.Runtime, src string) (goja.Callable, error) {
	v, err := vm.RunString("(" + src + ")")
	if err != nil {
		return nil, fmt.Errorf("compilation of the filter function failed: %v", err)
	}
	fn, ok := goja.AssertFunction(v)
	if !ok {
		return nil, fmt.Errorf("expression does not eval to a function")
	}
	return fn, nil
}

// NewFilter compiles the source of a `filters.<name>` function.
func NewFilter(src string, req Request) (*Filter, error) {
	vm := goja.New()
	installLog(vm)
	fn, err := compileFunc(vm, src)
	if err != nil {
		return nil, err
	}
	rj, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	rv, err := parseJSON(vm, rj)
	if err != nil {
		return nil, err
	}
	return &Filter{vm: vm, fn: fn, req: rv, Timeout: DefaultTimeout}, nil
}

// NewViewFilter compiles a `views.<name>.map` function: a doc passes the
// filter when the map function emits at least once for it.
func NewViewFilter(mapSrc string) (*Filter, error) {
	vm := goja.New()
	installLog(vm)
	f := &Filter{vm: vm, view: true, Timeout: DefaultTimeout}
	if err := vm.Set("emit", func(goja.FunctionCall) goja.Value { f.emitted = true; return goja.Undefined() }); err != nil {
		return nil, err
	}
	fn, err := compileFunc(vm, mapSrc)
	if err != nil {
		return nil, err
	}
	f.fn = fn
	return f, nil
}

func installLog(vm *goja.Runtime) {
	_ = vm.Set("log", func(goja.FunctionCall) goja.Value { return goja.Undefined() })
}

func parseJSON(vm *goja.Runtime, raw []byte) (goja.Value, error) {
	parse, ok := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("parse"))
	if !ok {
		return nil, fmt.Errorf("JSON.parse unavailable")
	}
	return parse(goja.Undefined(), vm.ToValue(string(raw)))
}

// Pass runs the filter on one document (its JSON) and reports whether the
// document passes. A thrown exception or a timeout yields an error.
func (f *Filter) Pass(doc []byte) (ok bool, err error) {
	dv, err := parseJSON(f.vm, doc)
	if err != nil {
		return false, err
	}
	timer := time.AfterFunc(f.Timeout, func() { f.vm.Interrupt("os_process_timeout") })
	defer func() {
		timer.Stop()
		f.vm.ClearInterrupt()
	}()
	if f.view {
		f.emitted = false
		if _, err := f.fn(goja.Undefined(), dv); err != nil {
			return false, err
		}
		return f.emitted, nil
	}
	res, err := f.fn(goja.Undefined(), dv, f.req)
	if err != nil {
		return false, err
	}
	return res.ToBoolean(), nil
}
