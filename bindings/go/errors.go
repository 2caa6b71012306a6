package kcsi

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"unsafe"
)

// Result is a kcsi result code (kcsi_result). The numbers are part of the C contract.
type Result int32

// Result codes; see the C API.
const (
	ResultOK                 Result = C.KCSI_OK
	ResultInvalidArgument    Result = C.KCSI_ERR_INVALID_ARGUMENT
	ResultNotFound           Result = C.KCSI_ERR_NOT_FOUND
	ResultAlreadyExists      Result = C.KCSI_ERR_ALREADY_EXISTS
	ResultUnsupportedVersion Result = C.KCSI_ERR_UNSUPPORTED_VERSION
	ResultDriver             Result = C.KCSI_ERR_DRIVER
	ResultKubernetes         Result = C.KCSI_ERR_KUBERNETES
	ResultIO                 Result = C.KCSI_ERR_IO
	ResultTimeout            Result = C.KCSI_ERR_TIMEOUT
	ResultNotSupported       Result = C.KCSI_ERR_NOT_SUPPORTED
	ResultUnavailable        Result = C.KCSI_ERR_UNAVAILABLE
	ResultFailedPrecondition Result = C.KCSI_ERR_FAILED_PRECONDITION
	ResultInternal           Result = C.KCSI_ERR_INTERNAL
)

// String returns the C name of r, e.g. "KCSI_ERR_NOT_FOUND", as the linked library names it
// ("KCSI_UNKNOWN_RESULT" for a number it does not define).
func (r Result) String() string {
	return C.GoString(C.kcsi_result_name(C.kcsi_result(r)))
}

// Class says how a volume manager must treat a failure, mirroring the kubelet's operation
// executor.
type Class int32

const (
	// ClassFinal: the operation finished with an error.
	ClassFinal Class = C.KCSI_CLASS_FINAL
	// ClassUncertain: the operation may still be in progress in the driver; treat the volume
	// as possibly mounted.
	ClassUncertain Class = C.KCSI_CLASS_UNCERTAIN
	// ClassTransient: nothing changed; retry later.
	ClassTransient Class = C.KCSI_CLASS_TRANSIENT
)

func (c Class) String() string {
	switch c {
	case ClassFinal:
		return "final"
	case ClassUncertain:
		return "uncertain"
	case ClassTransient:
		return "transient"
	}
	return fmt.Sprintf("class(%d)", int32(c))
}

// Error is a failed kcsi call. Every field is copied from the C error object inside the
// cgo call that failed, so it stays valid after the object is freed.
type Error struct {
	Op       string // the Go method, e.g. "RegisterPlugin"
	Result   Result
	Class    Class
	GRPCCode int32 // the CSI driver's gRPC status code, or -1 when the driver did not send one
	Message  string
	// UpstreamMessage is Message as upstream's plugin (pkg/volume/csi) words it, for what a
	// Kubernetes user reads (events, conditions): without the context kcsi adds.
	UpstreamMessage string

	closed bool // the Go handle was already closed; the call never reached C
}

func (e *Error) Error() string {
	return fmt.Sprintf("kcsi: %s: %s: %s", e.Op, e.Result, e.Message)
}

// Is matches the sentinel of e's result code (errors.Is(err, ErrNotFound)), ErrClosed for a
// call on a closed handle, and context.DeadlineExceeded for ResultTimeout, so code written
// against context deadlines recognises kcsi's timeouts.
func (e *Error) Is(target error) bool {
	if target == ErrClosed {
		return e.closed
	}
	if target == context.DeadlineExceeded {
		return e.Result == ResultTimeout
	}
	s, ok := target.(*sentinel)
	return ok && s.result == e.Result
}

// sentinel is the type of the Err* values: comparable identities for errors.Is.
type sentinel struct {
	result Result
	msg    string
}

func (s *sentinel) Error() string { return s.msg }

func newSentinel(r Result, msg string) *sentinel { return &sentinel{result: r, msg: "kcsi: " + msg} }

// Sentinels, one per result code, for errors.Is.
var (
	ErrInvalidArgument    error = newSentinel(ResultInvalidArgument, "invalid argument")
	ErrNotFound           error = newSentinel(ResultNotFound, "not found")
	ErrAlreadyExists      error = newSentinel(ResultAlreadyExists, "already exists")
	ErrUnsupportedVersion error = newSentinel(ResultUnsupportedVersion, "unsupported version")
	ErrDriver             error = newSentinel(ResultDriver, "CSI driver error")
	ErrKubernetes         error = newSentinel(ResultKubernetes, "Kubernetes API error")
	ErrIO                 error = newSentinel(ResultIO, "I/O error")
	ErrTimeout            error = newSentinel(ResultTimeout, "timeout")
	ErrNotSupported       error = newSentinel(ResultNotSupported, "not supported")
	ErrUnavailable        error = newSentinel(ResultUnavailable, "unavailable")
	ErrFailedPrecondition error = newSentinel(ResultFailedPrecondition, "failed precondition")
	ErrInternal           error = newSentinel(ResultInternal, "internal error")

	// ErrClosed: the call was made on a handle after Close. Such errors also match
	// ErrFailedPrecondition, as a call on a freed host's child does in C.
	ErrClosed = errors.New("kcsi: handle is closed")
)

// IsUncertain reports whether err is a kcsi error of class uncertain: the operation may still
// be running in the driver, so the volume must be treated as possibly mounted.
func IsUncertain(err error) bool { return classOf(err) == ClassUncertain }

// IsTransient reports whether err is a kcsi error of class transient: nothing changed and a
// retry may succeed.
func IsTransient(err error) bool { return classOf(err) == ClassTransient }

func classOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return -1
}

// check turns a shim's result into an error; it frees the copied message.
func check(op string, r C.kcsi_result, e *C.gk_err) error {
	if r == C.KCSI_OK {
		return nil
	}
	err := &Error{
		Op:       op,
		Result:   Result(e.result),
		Class:    Class(e.klass),
		GRPCCode: int32(e.grpc_code),
	}
	if e.message != nil {
		err.Message = C.GoString(e.message)
		C.free(unsafe.Pointer(e.message))
		e.message = nil
	} else {
		err.Message = "(no message)"
	}
	err.UpstreamMessage = err.Message
	if e.upstream != nil {
		err.UpstreamMessage = C.GoString(e.upstream)
		C.free(unsafe.Pointer(e.upstream))
		e.upstream = nil
	}
	return err
}

func closedError(op, kind string) error {
	return &Error{Op: op, Result: ResultFailedPrecondition, Class: ClassFinal, GRPCCode: -1,
		Message: "the " + kind + " is closed", closed: true}
}

// invalidArg is an error found on the Go side before any C call.
func invalidArg(op, format string, args ...any) error {
	return &Error{Op: op, Result: ResultInvalidArgument, Class: ClassFinal, GRPCCode: -1,
		Message: fmt.Sprintf(format, args...)}
}
