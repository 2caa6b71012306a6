//! The caller-owned error object and owned-string release.

use std::ffi::{c_char, CString};

use super::catch::guard_value;
use super::*;
use crate::error::{Error, ErrorClass, ErrorKind};

/// An error returned through `err_out`. Caller owns it; free with `kcsi_error_free`.
pub struct kcsi_error {
    result: kcsi_result,
    class: i32,
    grpc_code: i32,
    message: CString,
    upstream_message: CString,
}

pub(crate) fn result_code(kind: ErrorKind) -> kcsi_result {
    match kind {
        ErrorKind::InvalidArgument => KCSI_ERR_INVALID_ARGUMENT,
        ErrorKind::NotFound => KCSI_ERR_NOT_FOUND,
        ErrorKind::AlreadyExists => KCSI_ERR_ALREADY_EXISTS,
        ErrorKind::UnsupportedVersion => KCSI_ERR_UNSUPPORTED_VERSION,
        ErrorKind::Driver => KCSI_ERR_DRIVER,
        ErrorKind::Kubernetes => KCSI_ERR_KUBERNETES,
        ErrorKind::Io => KCSI_ERR_IO,
        ErrorKind::Timeout => KCSI_ERR_TIMEOUT,
        ErrorKind::NotSupported => KCSI_ERR_NOT_SUPPORTED,
        ErrorKind::Unavailable => KCSI_ERR_UNAVAILABLE,
        ErrorKind::FailedPrecondition => KCSI_ERR_FAILED_PRECONDITION,
        ErrorKind::Internal => KCSI_ERR_INTERNAL,
    }
}

/// A C string from Rust text; interior NULs (never expected) are shown as `\0`.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| CString::new(s.replace('\0', "\\0")).unwrap_or_default())
}

impl kcsi_error {
    pub(crate) fn from_error(e: &Error) -> kcsi_error {
        kcsi_error {
            result: result_code(e.kind()),
            class: match e.class() {
                ErrorClass::Final => KCSI_CLASS_FINAL,
                ErrorClass::Uncertain => KCSI_CLASS_UNCERTAIN,
                ErrorClass::Transient => KCSI_CLASS_TRANSIENT,
            },
            grpc_code: e.grpc_code().unwrap_or(-1),
            message: c_string(e.message()),
            upstream_message: c_string(e.upstream_message()),
        }
    }
}

/// The result code carried by `e`. `KCSI_ERR_INVALID_ARGUMENT` when `e` is NULL.
#[no_mangle]
pub extern "C" fn kcsi_error_result(e: *const kcsi_error) -> kcsi_result {
    guard_value(KCSI_ERR_INTERNAL, || {
        unsafe { e.as_ref() }.map_or(KCSI_ERR_INVALID_ARGUMENT, |e| e.result)
    })
}

/// The message of `e`: what failed, with which input. Borrowed: valid until
/// `kcsi_error_free(e)`. NULL when `e` is NULL.
#[no_mangle]
pub extern "C" fn kcsi_error_message(e: *const kcsi_error) -> *const c_char {
    guard_value(std::ptr::null(), || {
        unsafe { e.as_ref() }.map_or(std::ptr::null(), |e| e.message.as_ptr())
    })
}

/// The message as upstream's plugin (`pkg/volume/csi`) words this failure, for hosts that show
/// it to Kubernetes users (the kubelet's and the attach/detach controller's events, a claim's
/// conditions): `kcsi_error_message` without the context kcsi adds (which driver, at which
/// socket), or the same text when kcsi adds none. Borrowed: valid until `kcsi_error_free(e)`.
/// NULL when `e` is NULL.
#[no_mangle]
pub extern "C" fn kcsi_error_upstream_message(e: *const kcsi_error) -> *const c_char {
    guard_value(std::ptr::null(), || {
        unsafe { e.as_ref() }.map_or(std::ptr::null(), |e| e.upstream_message.as_ptr())
    })
}

/// The gRPC status code the CSI driver returned, or -1 when the error did not come from a
/// driver's answer (also for a NULL `e`).
#[no_mangle]
pub extern "C" fn kcsi_error_grpc_code(e: *const kcsi_error) -> i32 {
    guard_value(-1, || unsafe { e.as_ref() }.map_or(-1, |e| e.grpc_code))
}

/// The class of `e`: `KCSI_CLASS_FINAL`, `KCSI_CLASS_UNCERTAIN` or `KCSI_CLASS_TRANSIENT`;
/// -1 when `e` is NULL.
#[no_mangle]
pub extern "C" fn kcsi_error_class(e: *const kcsi_error) -> i32 {
    guard_value(-1, || unsafe { e.as_ref() }.map_or(-1, |e| e.class))
}

/// Frees an error. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_error_free(e: *mut kcsi_error) {
    guard_value((), || {
        if !e.is_null() {
            drop(unsafe { Box::from_raw(e) });
        }
    })
}

/// Frees a string kcsi returned through an `*_out` parameter. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_string_free(s: *mut c_char) {
    guard_value((), || {
        if !s.is_null() {
            drop(unsafe { CString::from_raw(s) });
        }
    })
}
