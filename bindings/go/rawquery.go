package kcsi

/*
#include <string.h>
#include "shim.h"

// The volume name is copied into the caller's buffer in the same cgo call (a longer one is
// handed over in *big), saving the second call that would free kcsi's string.
static kcsi_result gk_get_volume_name_into(kcsi_host *h, const char *spec, char *buf, size_t cap,
                                           size_t *len, char **big, gk_err *e) {
	kcsi_error *err = NULL;
	char *out = NULL;
	kcsi_result r = kcsi_get_volume_name(h, spec, &out, &err);
	if (r == KCSI_OK) {
		size_t n = strlen(out);
		*len = n;
		if (n <= cap) {
			memcpy(buf, out, n);
			kcsi_string_free(out);
		} else {
			*big = out;
		}
	}
	return gk_take(r, err, e);
}
*/
import "C"

import (
	"bytes"
	"runtime"
	"sync"
	"unsafe"
)

// The queries' fast path for specs given as JSON text (Spec.JSON): the kubelet asks them of
// every volume on every reconcile loop. One allocation holds the NUL-terminated spec (and the
// answer), and there is one cgo call per query.

const volumeNameCap = 256 // "<driver>^<handle>": driver names have at most 63 bytes

// rawSpecCap bounds the specs the fast path takes; longer ones take the general path.
const rawSpecCap = 1024

// rawCall is the memory of one fast query: the NUL-terminated spec, the answer buffer and
// what C writes. It holds no Go pointers (cgo's rule for memory C writes to). Pooled, so a
// query's only garbage is its answer string.
type rawCall struct {
	spec   [rawSpecCap]byte
	answer [volumeNameCap]byte
	n      C.size_t
	big    *C.char
	ok     C.bool
	e      C.gk_err
}

var rawCalls = sync.Pool{New: func() any { return new(rawCall) }}

// newRawCall copies text (shorter than rawSpecCap), NUL-terminated, into a pooled rawCall.
func newRawCall(op string, text []byte) (*rawCall, error) {
	if bytes.IndexByte(text, 0) >= 0 {
		return nil, invalidArg(op, "spec contains a NUL byte")
	}
	c := rawCalls.Get().(*rawCall)
	c.spec[copy(c.spec[:], text)] = 0
	c.n, c.big, c.ok, c.e = 0, nil, false, C.gk_err{}
	return c, nil
}

func (h *Host) volumeNameRaw(op string, text []byte) (string, error) {
	c, err := newRawCall(op, text)
	if err != nil {
		return "", err
	}
	defer rawCalls.Put(c)
	p, err := h.h.acquire(op)
	if err != nil {
		return "", err
	}
	r := C.gk_get_volume_name_into(p, (*C.char)(unsafe.Pointer(&c.spec[0])), (*C.char)(unsafe.Pointer(&c.answer[0])),
		volumeNameCap, &c.n, &c.big, &c.e)
	h.h.release()
	runtime.KeepAlive(h)
	if err := check(op, r, &c.e); err != nil {
		return "", err
	}
	if c.big != nil {
		return takeString(c.big), nil
	}
	return string(c.answer[:c.n]), nil
}

func (h *Host) boolQueryRaw(op string, text []byte, fn boolQuery) (bool, error) {
	c, err := newRawCall(op, text)
	if err != nil {
		return false, err
	}
	defer rawCalls.Put(c)
	p, err := h.h.acquire(op)
	if err != nil {
		return false, err
	}
	r := fn(p, (*C.char)(unsafe.Pointer(&c.spec[0])), &c.ok, &c.e)
	h.h.release()
	runtime.KeepAlive(h)
	if err := check(op, r, &c.e); err != nil {
		return false, err
	}
	return bool(c.ok), nil
}
