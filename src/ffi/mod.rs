//! The C ABI shell over the safe core: converts and checks C values, catches panics, maps
//! errors to result codes. It owns no behaviour of its own.
//!
//! Every export runs its body through [`boundary`], so a panic never unwinds into C.
#![allow(non_camel_case_types)]
// Exports are safe `extern "C"` fns by design: pointer validity is the C caller's contract.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

// The header follows this order, the lifecycle a host goes through.
pub mod error;
pub mod host;
pub mod host_metrics;
pub mod registration;
pub mod queries;
pub mod attacher;
pub mod exhausted;
pub mod device_mounts;
pub mod mounter;
pub mod block;
pub mod expand;
pub mod reconstruct;
pub mod log;
pub mod dlopen;

mod boundary;
mod catch;
mod config;
mod handle;

use std::ffi::c_char;

/// Result of every fallible kcsi call. `KCSI_OK` (0) is success; the numbers are fixed.
pub type kcsi_result = i32;

/// Success.
pub const KCSI_OK: kcsi_result = 0;
/// NULL where a value is required, bad UTF-8, bad JSON, bad spec, unsafe path or name.
pub const KCSI_ERR_INVALID_ARGUMENT: kcsi_result = 1;
/// Driver not registered, volume data missing, object not found.
pub const KCSI_ERR_NOT_FOUND: kcsi_result = 2;
/// A driver with that name is registered with an equal or higher version.
pub const KCSI_ERR_ALREADY_EXISTS: kcsi_result = 3;
/// No CSI version the plugin supports (must be 1.x).
pub const KCSI_ERR_UNSUPPORTED_VERSION: kcsi_result = 4;
/// The CSI driver answered with an error (see `kcsi_error_grpc_code`).
pub const KCSI_ERR_DRIVER: kcsi_result = 5;
/// The Kubernetes API answered with an error.
pub const KCSI_ERR_KUBERNETES: kcsi_result = 6;
/// A filesystem operation failed.
pub const KCSI_ERR_IO: kcsi_result = 7;
/// The deadline passed.
pub const KCSI_ERR_TIMEOUT: kcsi_result = 8;
/// The driver lacks the capability (stats, expansion) or the mode.
pub const KCSI_ERR_NOT_SUPPORTED: kcsi_result = 9;
/// Driver socket or API server unreachable.
pub const KCSI_ERR_UNAVAILABLE: kcsi_result = 10;
/// Wrong state (e.g. a handle of a freed host).
pub const KCSI_ERR_FAILED_PRECONDITION: kcsi_result = 11;
/// A bug in kcsi, including a caught panic.
pub const KCSI_ERR_INTERNAL: kcsi_result = 12;

/// Error class: the operation finished with an error.
pub const KCSI_CLASS_FINAL: i32 = 0;
/// Error class: the operation may still be in progress in the driver; treat the volume as
/// possibly mounted.
pub const KCSI_CLASS_UNCERTAIN: i32 = 1;
/// Error class: nothing changed; retry later (e.g. driver not registered yet).
pub const KCSI_CLASS_TRANSIENT: i32 = 2;

/// The library version, e.g. "0.1.0". Static: do not free.
#[no_mangle]
pub extern "C" fn kcsi_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The name of a result code, e.g. "KCSI_ERR_NOT_FOUND"; "KCSI_UNKNOWN_RESULT" for a number
/// kcsi does not define. Static: do not free.
#[no_mangle]
pub extern "C" fn kcsi_result_name(r: kcsi_result) -> *const c_char {
    let name: &'static str = match r {
        KCSI_OK => "KCSI_OK\0",
        KCSI_ERR_INVALID_ARGUMENT => "KCSI_ERR_INVALID_ARGUMENT\0",
        KCSI_ERR_NOT_FOUND => "KCSI_ERR_NOT_FOUND\0",
        KCSI_ERR_ALREADY_EXISTS => "KCSI_ERR_ALREADY_EXISTS\0",
        KCSI_ERR_UNSUPPORTED_VERSION => "KCSI_ERR_UNSUPPORTED_VERSION\0",
        KCSI_ERR_DRIVER => "KCSI_ERR_DRIVER\0",
        KCSI_ERR_KUBERNETES => "KCSI_ERR_KUBERNETES\0",
        KCSI_ERR_IO => "KCSI_ERR_IO\0",
        KCSI_ERR_TIMEOUT => "KCSI_ERR_TIMEOUT\0",
        KCSI_ERR_NOT_SUPPORTED => "KCSI_ERR_NOT_SUPPORTED\0",
        KCSI_ERR_UNAVAILABLE => "KCSI_ERR_UNAVAILABLE\0",
        KCSI_ERR_FAILED_PRECONDITION => "KCSI_ERR_FAILED_PRECONDITION\0",
        KCSI_ERR_INTERNAL => "KCSI_ERR_INTERNAL\0",
        _ => "KCSI_UNKNOWN_RESULT\0",
    };
    name.as_ptr().cast()
}
