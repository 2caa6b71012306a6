//! Panics stopped at the C boundary: unwinding into C is undefined behaviour, so every export
//! runs its body under `catch_unwind`.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// A caught panic's message.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// Runs an infallible export body; a caught panic yields `fallback`.
pub(crate) fn guard_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}
