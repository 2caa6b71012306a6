package kcsi

/*
#include <string.h>
#include "shim.h"

#define GK_RAW_SPEC_CAP 1024
#define GK_RAW_ANSWER_CAP 256

// One fast query's memory: the spec in, the answer and the error out.
typedef struct gk_raw {
	char spec[GK_RAW_SPEC_CAP];
	char answer[GK_RAW_ANSWER_CAP];
	size_t n;
	char *big;
	bool ok;
	gk_err e;
} gk_raw;

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
	"sync/atomic"
	"unsafe"
)

// The queries' fast path for specs given as JSON text (Spec.JSON): the kubelet asks them of
// every volume on every reconcile loop. The NUL-terminated spec, the answer and what C writes
// live in one pooled block of C memory (so cgo has no Go pointer to check), and there is one
// cgo call per query.

const volumeNameCap = C.GK_RAW_ANSWER_CAP // "<driver>^<handle>": driver names have at most 63 bytes

// rawSpecCap bounds the specs the fast path takes; longer ones take the general path.
const rawSpecCap = C.GK_RAW_SPEC_CAP

// rawCall is the memory of one fast query, in C. Pooled, so a query's only garbage is its
// answer string; a block the pool drops is freed with its wrapper.
type rawCall struct{ c *C.gk_raw }

var rawCalls = sync.Pool{New: func() any {
	r := &rawCall{(*C.gk_raw)(C.malloc(C.sizeof_gk_raw))}
	runtime.AddCleanup(r, func(c *C.gk_raw) { C.free(unsafe.Pointer(c)) }, r.c)
	return r
}}

// newRawCall copies text (shorter than rawSpecCap), NUL-terminated, into a pooled rawCall;
// what names the argument for an error.
func newRawCall(op, what string, text []byte) (*rawCall, error) {
	if bytes.IndexByte(text, 0) >= 0 {
		return nil, invalidArg(op, "%s contains a NUL byte", what)
	}
	r := rawCalls.Get().(*rawCall)
	spec := unsafe.Slice((*byte)(unsafe.Pointer(&r.c.spec[0])), rawSpecCap)
	spec[copy(spec, text)] = 0
	r.c.n, r.c.big, r.c.ok, r.c.e = 0, nil, false, C.gk_err{}
	return r, nil
}

func (h *Host) volumeNameRaw(op string, text []byte) (string, error) {
	r, err := newRawCall(op, "spec", text)
	if err != nil {
		return "", err
	}
	defer rawCalls.Put(r)
	p, err := h.h.acquire(op)
	if err != nil {
		return "", err
	}
	c := r.c
	res := C.gk_get_volume_name_into(p, &c.spec[0], &c.answer[0], volumeNameCap, &c.n, &c.big, &c.e)
	h.h.release()
	runtime.KeepAlive(h)
	if err := check(op, res, &c.e); err != nil {
		return "", err
	}
	if c.big != nil {
		return takeString(c.big), nil
	}
	return C.GoStringN(&c.answer[0], C.int(c.n)), nil
}

func (h *Host) boolQueryRaw(op string, text []byte, fn boolQuery) (bool, error) {
	return h.boolQueryRawArg(op, "spec", text, fn)
}

func (h *Host) boolQueryRawArg(op, what string, text []byte, fn boolQuery) (bool, error) {
	r, err := newRawCall(op, what, text)
	if err != nil {
		return false, err
	}
	defer rawCalls.Put(r)
	p, err := h.h.acquire(op)
	if err != nil {
		return false, err
	}
	c := r.c
	res := fn(p, &c.spec[0], &c.ok, &c.e)
	h.h.release()
	runtime.KeepAlive(h)
	if err := check(op, res, &c.e); err != nil {
		return false, err
	}
	return bool(c.ok), nil
}

// DriverAttachRequired reports whether PersistentVolumes of driver need attaching (CanAttach
// without a spec to encode): its CSIDriver's attachRequired, true when it has none. The
// kubelet's reconciler asks it of every volume every 100 ms, so an answer is kept until kcsi's
// CSIDriver generation moves, and asking again costs no cgo call.
func (h *Host) DriverAttachRequired(driver string) (bool, error) {
	const op = "DriverAttachRequired"
	if len(driver) >= rawSpecCap {
		return false, invalidArg(op, "driver name is longer than a CSI driver name can be")
	}
	if _, err := h.h.acquire(op); err != nil {
		return false, err
	}
	// Read before asking: a change after this read makes the cached answer a miss.
	generation := atomic.LoadUint64(h.csiDrivers)
	h.h.release()
	if a, ok := h.attachRequired.Load(driver); ok && a.(factAnswer).generation == generation {
		return a.(factAnswer).value, nil
	}
	need, err := h.boolQueryRawArg(op, "driver name", []byte(driver), func(p *C.kcsi_host, s *C.char, o *C.bool, e *C.gk_err) C.kcsi_result {
		return C.gk_driver_attach_required(p, s, o, e)
	})
	if err == nil {
		h.attachRequired.Store(driver, factAnswer{generation, need})
	}
	return need, err
}

// factAnswer is a driver-fact answer and the CSIDriver generation read before asking it.
type factAnswer struct {
	generation uint64
	value      bool
}
