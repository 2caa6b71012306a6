//! Log routing export.

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::sync::Arc;

use super::boundary::guard;
use super::error::{c_string, kcsi_error};
use super::kcsi_result;
use crate::error::Error;
use crate::logging;

/// Receives one log record: `level` 0 error .. 4 trace, `target` the kcsi module, `message`
/// the text. Both strings are borrowed for the call only. May run on any thread, concurrently;
/// must not call back into kcsi.
pub type kcsi_log_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        level: i32,
        target: *const c_char,
        message: *const c_char,
    ),
>;

thread_local! {
    static IN_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// The host's pointer, handed back untouched; the contract makes the callback thread-safe.
struct UserData(*mut c_void);
unsafe impl Send for UserData {}
unsafe impl Sync for UserData {}

impl UserData {
    // A method, so closures capture the whole (Send) wrapper, not the raw pointer field.
    fn get(&self) -> *mut c_void {
        self.0
    }
}

/// Routes kcsi's log records with a level up to `max_level` (0 error .. 4 trace) to `cb`, or
/// back to stderr when `cb` is NULL. Returns only once no record is still being delivered to
/// the previous callback, so its `user_data` may be freed right after; a callback must never
/// wait for a thread that is calling this. Refused (`KCSI_ERR_INVALID_ARGUMENT`) from inside a
/// callback. A record's message is the text followed by its fields as klog writes them
/// (`msg driver="d" volume="v"`). Only kcsi's own records are routed; the libraries under it
/// are silent unless the environment variable `KCSI_LOG_LIBRARIES=1` is set.
/// Nullable: cb, user_data.
#[no_mangle]
pub extern "C" fn kcsi_set_log_callback(
    cb: kcsi_log_fn,
    user_data: *mut c_void,
    max_level: i32,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        if IN_CALLBACK.with(Cell::get) {
            return Err(Error::invalid(
                "kcsi_set_log_callback was called from inside a log callback",
            ));
        }
        if !(0..=4).contains(&max_level) {
            return Err(Error::invalid(format!(
                "max_level must be 0 (error) to 4 (trace), got {max_level}"
            )));
        }
        let sink = cb.map(|f| {
            let data = UserData(user_data);
            Arc::new(move |level: i32, target: &str, message: &str| {
                let target = c_string(target);
                let message = c_string(message);
                IN_CALLBACK.with(|c| c.set(true));
                // A panic cannot come from C; the flag is reset either way.
                unsafe { f(data.get(), level, target.as_ptr(), message.as_ptr()) };
                IN_CALLBACK.with(|c| c.set(false));
            }) as logging::Sink
        });
        logging::set_sink(sink, max_level);
        Ok(())
    })
}
