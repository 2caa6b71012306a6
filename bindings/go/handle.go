package kcsi

import "sync"

// handle owns one C handle and makes Close safe against calls in flight on other goroutines:
// every call holds a reference for its duration, and the C free runs when the handle is
// closed and the last call has returned. Close therefore never blocks and never frees memory
// a running C call still uses.
type handle[P comparable] struct {
	mu     sync.Mutex
	ptr    P // a *C.kcsi_* pointer; cgo's opaque struct types cannot be type arguments
	calls  int
	closed bool
	kind   string // "host", "mounter", ... for error messages
	free   func(P)
}

func newHandle[P comparable](kind string, ptr P, free func(P)) *handle[P] {
	return &handle[P]{ptr: ptr, kind: kind, free: free}
}

// acquire returns the C pointer for one call; the caller must release it afterwards.
func (h *handle[P]) acquire(op string) (P, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		var zero P
		return zero, closedError(op, h.kind)
	}
	h.calls++
	return h.ptr, nil
}

func (h *handle[P]) release() {
	h.mu.Lock()
	h.calls--
	p, ok := h.takeIfIdle()
	h.mu.Unlock()
	if ok {
		h.free(p)
	}
}

// close marks the handle closed; it reports whether this was the first close.
func (h *handle[P]) close() bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	h.closed = true
	p, ok := h.takeIfIdle()
	h.mu.Unlock()
	if ok {
		h.free(p)
	}
	return true
}

// takeIfIdle hands out the pointer exactly once, when closed with no call in flight.
// Called with mu held.
func (h *handle[P]) takeIfIdle() (P, bool) {
	var zero P
	if !h.closed || h.calls > 0 || h.ptr == zero {
		return zero, false
	}
	p := h.ptr
	h.ptr = zero
	return p, true
}
