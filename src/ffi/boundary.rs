//! The boundary every export goes through: panic capture, error objects, and checked
//! conversions of C arguments.

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use serde::Deserialize;

use super::catch::panic_message;
use super::error::{c_string, kcsi_error, result_code};
use super::{kcsi_result, KCSI_OK};
use crate::error::{Error, Result};

/// `guard!(err_out, || { ... })` in an export runs the body through [`run_guarded`], which names
/// the export in a caught panic's message; `guard!(err_out, |export| { ... })` also hands the
/// body that name (for `Host::node_only`), so no export spells its own name.
macro_rules! guard {
    ($err_out:expr, |$export:ident| $body:expr) => {{
        fn here() {}
        let here = std::any::type_name_of_val(&here);
        let $export = $crate::ffi::boundary::export_name(here);
        $crate::ffi::boundary::run_guarded(here, $err_out, || $body)
    }};
    ($err_out:expr, $body:expr) => {{
        fn here() {}
        $crate::ffi::boundary::run_guarded(std::any::type_name_of_val(&here), $err_out, $body)
    }};
}
pub(crate) use guard;

/// The export's own name from the path of a fn item inside it
/// (`kcsi::ffi::mounter::kcsi_mounter_new::here`).
pub(crate) fn export_name(path: &str) -> &str {
    let path = path.strip_suffix("::here").unwrap_or(path);
    path.rsplit("::").next().unwrap_or(path)
}

/// Runs a fallible export body: success is `KCSI_OK`; an error (or a caught panic, as
/// `KCSI_ERR_INTERNAL`) becomes a result code and, when `err_out` is not NULL, an error object.
pub(crate) fn run_guarded(
    here: &'static str,
    err_out: *mut *mut kcsi_error,
    body: impl FnOnce() -> Result<()>,
) -> kcsi_result {
    let outcome = catch_unwind(AssertUnwindSafe(body));
    crate::runtime::after_call();
    let err = match outcome {
        Ok(Ok(())) => return KCSI_OK,
        Ok(Err(e)) => e,
        Err(payload) => Error::internal(format!(
            "{} panicked: {}",
            export_name(here),
            panic_message(&*payload)
        )),
    };
    let code = result_code(err.kind());
    if !err_out.is_null() {
        // The caller's slot; written only on failure, as the contract says.
        unsafe { *err_out = Box::into_raw(Box::new(kcsi_error::from_error(&err))) };
    }
    code
}

/// A borrowed, NUL-terminated UTF-8 argument that must not be NULL.
pub(crate) fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|e| Error::invalid(format!("{what} is not valid UTF-8: {e}")))
}

/// Like [`str_arg`], but NULL means absent.
pub(crate) fn opt_str_arg<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    str_arg(p, what).map(Some)
}

/// An array of strings: pointer + length, `NULL, 0` being empty.
pub(crate) fn str_array(p: *const *const c_char, len: usize, what: &str) -> Result<Vec<String>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Error::invalid(format!(
            "{what} is NULL but its length is {len}"
        )));
    }
    let items = unsafe { std::slice::from_raw_parts(p, len) };
    items
        .iter()
        .enumerate()
        .map(|(i, &s)| str_arg(s, &format!("{what}[{i}]")).map(str::to_string))
        .collect()
}

/// A JSON argument parsed into `T`.
/// `T` may borrow from the argument, which lives for the call.
pub(crate) fn json_arg<'a, T: Deserialize<'a>>(p: *const c_char, what: &str) -> Result<T> {
    let text = str_arg(p, what)?;
    serde_json::from_str(text).map_err(|e| Error::invalid(format!("{what} is not valid: {e}")))
}

/// An optional JSON argument: NULL means `T::default()`.
pub(crate) fn opt_json_arg<'a, T: Deserialize<'a> + Default>(
    p: *const c_char,
    what: &str,
) -> Result<T> {
    match opt_str_arg(p, what)? {
        None => Ok(T::default()),
        Some(_) => json_arg(p, what),
    }
}

/// Checks an output pointer before any work is done.
pub(crate) fn out_arg<T>(p: *mut T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    Ok(())
}

/// Writes an owned string (freed with `kcsi_string_free`) to a checked output pointer.
pub(crate) fn write_string(p: *mut *mut c_char, s: &str) {
    unsafe { *p = c_string(s).into_raw() };
}

/// Writes `value` as an owned JSON string (freed with `kcsi_string_free`) to a checked output
/// pointer; `what` names it in the (internal) error should encoding fail.
pub(crate) fn write_json(
    p: *mut *mut c_char,
    value: &impl serde::Serialize,
    what: &str,
) -> Result<()> {
    write_string(p, &encoded(serde_json::to_string(value), what)?);
    Ok(())
}

/// [`write_json`] with every object's keys sorted, as a `serde_json::Value` keeps them: the
/// form of the status, driver-list, block-paths and reconstruction exports.
pub(crate) fn write_json_sorted(
    p: *mut *mut c_char,
    value: &impl serde::Serialize,
    what: &str,
) -> Result<()> {
    write_json(p, &encoded(serde_json::to_value(value), what)?, what)
}

fn encoded<T>(encoding: serde_json::Result<T>, what: &str) -> Result<T> {
    encoding.map_err(|e| Error::internal(format!("cannot encode {what}: {e}")))
}

/// Writes a value to a checked output pointer.
pub(crate) fn write_value<T>(p: *mut T, v: T) {
    unsafe { *p = v };
}
