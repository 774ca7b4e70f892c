package jsfilter

import (
	"fmt"
	"time"

	"github.com/dop251/goja"
)

// Rejection is a document refused by a validate_doc_update function: the
// function threw {forbidden: reason} (403) or {unauthorized: reason} (401).
type Rejection struct {
	Status int
	Err    string
	Reason string
}

// Error formats the rejection.
func (r *Rejection) Error() string { return fmt.Sprintf("%d %s: %s", r.Status, r.Err, r.Reason) }

// Validator runs a db's validate_doc_update functions (one per design doc)
// as function(newDoc, oldDoc, userCtx, secObj). Not safe for concurrent
// use: compile one per request.
type Validator struct {
	vm      *goja.Runtime
	fns     []goja.Callable
	Timeout time.Duration
}

// NewValidator compiles the given validate_doc_update sources.
func NewValidator(srcs []string) (*Validator, error) {
	vm := goja.New()
	installLog(vm)
	v := &Validator{vm: vm, Timeout: DefaultTimeout}
	for _, src := range srcs {
		fn, err := compileFunc(vm, src)
		if err != nil {
			return nil, err
		}
		v.fns = append(v.fns, fn)
	}
	return v, nil
}

// Validate runs every function on the new doc (JSON), the old doc (JSON or
// nil), the user context and the security object (JSON). It returns a
// *Rejection for {forbidden}/{unauthorized} throws and an error for any
// other failure.
func (v *Validator) Validate(newDoc, oldDoc, userCtx, secObj []byte) error {
	if len(v.fns) == 0 {
		return nil
	}
	args := make([]goja.Value, 4)
	for i, raw := range [][]byte{newDoc, oldDoc, userCtx, secObj} {
		if raw == nil {
			args[i] = goja.Null()
			continue
		}
		val, err := parseJSON(v.vm, raw)
		if err != nil {
			return err
		}
		args[i] = val
	}
	timer := time.AfterFunc(v.Timeout, func() { v.vm.Interrupt("os_process_timeout") })
	defer func() {
		timer.Stop()
		v.vm.ClearInterrupt()
	}()
	for _, fn := range v.fns {
		if _, err := fn(goja.Undefined(), args...); err != nil {
			if ex, ok := err.(*goja.Exception); ok {
				if obj, ok := ex.Value().Export().(map[string]any); ok {
					if msg, ok := obj["forbidden"]; ok {
						return &Rejection{Status: 403, Err: "forbidden", Reason: fmt.Sprint(msg)}
					}
					if msg, ok := obj["unauthorized"]; ok {
						return &Rejection{Status: 401, Err: "unauthorized", Reason: fmt.Sprint(msg)}
					}
				}
			}
			return err
		}
	}
	return nil
}
