package kcsi

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"
	"unsafe"
)

// args converts Go arguments for one C call. Strings are NUL-terminated copies in Go memory
// (no C allocation to leak); arrays of them are pinned, as cgo requires for Go pointers stored
// in memory passed to C. Call done when the C call has returned.
type args struct {
	op     string
	pinner runtime.Pinner
	err    error
}

func newArgs(op string) *args { return &args{op: op} }

// str returns s as a C string; a NUL inside s is an invalid argument (C would cut it short).
func (a *args) str(what, s string) *C.char {
	if strings.IndexByte(s, 0) >= 0 {
		a.fail(invalidArg(a.op, "%s contains a NUL byte: %q", what, s))
		return nil
	}
	b := make([]byte, len(s)+1)
	copy(b, s)
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// strs returns ss as a C array of C strings and its length; an empty slice is (NULL, 0).
func (a *args) strs(what string, ss []string) (**C.char, C.size_t) {
	if len(ss) == 0 {
		return nil, 0
	}
	arr := make([]*C.char, len(ss))
	for i, s := range ss {
		arr[i] = a.str(fmt.Sprintf("%s[%d]", what, i), s)
		if arr[i] != nil {
			a.pinner.Pin(arr[i])
		}
	}
	return &arr[0], C.size_t(len(ss))
}

// json marshals v into a C string. A json.RawMessage or []byte is taken as JSON text as is.
func (a *args) json(what string, v any) *C.char {
	var text []byte
	switch v := v.(type) {
	case json.RawMessage:
		text = v
	case []byte:
		text = v
	case string:
		text = []byte(v)
	case Spec:
		if v.JSON != nil { // already encoded: skip encoding/json's re-validation
			text = v.JSON
			break
		}
		var err error
		if text, err = json.Marshal(v); err != nil {
			a.fail(invalidArg(a.op, "%s cannot be encoded as JSON: %v", what, err))
			return nil
		}
	default:
		var err error
		if text, err = json.Marshal(v); err != nil {
			a.fail(invalidArg(a.op, "%s cannot be encoded as JSON: %v", what, err))
			return nil
		}
	}
	return a.str(what, string(text))
}

// optJSON is like json, but nil stays NULL (the C API's "none").
func (a *args) optJSON(what string, v any) *C.char {
	if v == nil {
		return nil
	}
	return a.json(what, v)
}

func (a *args) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}

func (a *args) done() { a.pinner.Unpin() }

// takeString copies a string kcsi returned and frees the original.
func takeString(p *C.char) string {
	if p == nil {
		return ""
	}
	s := C.GoString(p)
	C.kcsi_string_free(p)
	return s
}

// beforeCall refuses a call whose context is already done: nothing has been started.
func beforeCall(ctx context.Context, op string) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Op: op, Result: ResultTimeout, Class: ClassTransient, GRPCCode: -1,
			Message: "the context's deadline passed before the call started"}
	}
	return fmt.Errorf("kcsi: %s: %w", op, context.Cause(ctx))
}

// timeoutMS turns ctx's deadline into the C API's timeout_ms: 0 (the host's timeout) when
// there is none, at least 1 otherwise, so a nearly expired deadline still means "short".
func timeoutMS(ctx context.Context, op string) (C.int64_t, error) {
	if err := beforeCall(ctx, op); err != nil {
		return 0, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return 0, nil
	}
	left := time.Until(deadline)
	if left <= 0 {
		return 0, &Error{Op: op, Result: ResultTimeout, Class: ClassTransient, GRPCCode: -1,
			Message: "the context's deadline passed before the call started"}
	}
	ms := left.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return C.int64_t(ms), nil
}
