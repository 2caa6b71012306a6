package kcsi

import "sync/atomic"

// handle owns one C handle and makes Close safe against calls in flight on other goroutines:
// every call holds a reference for its duration, and the C free runs when the handle is
// closed and the last call has returned. Close therefore never blocks and never frees memory
// a running C call still uses. Lock-free: the queries the kubelet asks of every volume every
// 100 ms take a reference each, from many goroutines at once.
type handle[P comparable] struct {
	ptr   P // a *C.kcsi_* pointer; cgo's opaque struct types cannot be type arguments
	state atomic.Int64
	freed atomic.Bool
	kind  string // "host", "mounter", ... for error messages
	free  func(P)
}

// closedBit in state marks the handle closed; the bits below count calls in flight.
const closedBit = 1 << 62

func newHandle[P comparable](kind string, ptr P, free func(P)) *handle[P] {
	return &handle[P]{ptr: ptr, kind: kind, free: free}
}

// acquire returns the C pointer for one call; the caller must release it afterwards.
func (h *handle[P]) acquire(op string) (P, error) {
	if h.state.Add(1)&closedBit != 0 {
		h.release()
		var zero P
		return zero, closedError(op, h.kind)
	}
	return h.ptr, nil
}

func (h *handle[P]) release() {
	if h.state.Add(-1) == closedBit {
		h.freeOnce()
	}
}

// close marks the handle closed; it reports whether this was the first close.
func (h *handle[P]) close() bool {
	old := h.state.Or(closedBit)
	if old&closedBit != 0 {
		return false
	}
	if old == 0 {
		h.freeOnce()
	}
	return true
}

// freeOnce frees the C handle the first time the count of calls reaches zero after close (a
// call refused after close passes zero again).
func (h *handle[P]) freeOnce() {
	if h.freed.CompareAndSwap(false, true) {
		h.free(h.ptr)
	}
}
