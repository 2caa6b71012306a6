//! The one way C handles are made, read and freed.
//!
//! Every handle is a boxed `Arc` of its Rust value. A call clones the `Arc` on entry and works
//! on its own reference, so a handle freed by another thread while the call runs stays alive
//! until the call returns (only the box, which the call no longer reads, goes at once). A
//! child handle (mounter, attacher, block mapper, ...) holds its host weakly: every call on it
//! first takes the host back, and fails with `KCSI_ERR_FAILED_PRECONDITION` once the host was
//! freed — one rule for every child handle, queries included.

use std::sync::{Arc, Weak};

use crate::error::{Error, ErrorKind, Result};
use crate::host::Host;

/// A C handle type: an opaque struct around an `Arc` of what it stands for.
pub(crate) trait Handle: Sized {
    /// How errors name it: "mounter is NULL".
    const NAME: &'static str;
    type Inner;
    fn wrap(inner: Arc<Self::Inner>) -> Self;
    fn inner(&self) -> &Arc<Self::Inner>;
}

/// Implements [`Handle`] for `struct $ty(Arc<$inner>)`.
macro_rules! impl_handle {
    ($ty:ident, $name:literal, $inner:ty) => {
        impl $crate::ffi::handle::Handle for $ty {
            const NAME: &'static str = $name;
            type Inner = $inner;
            fn wrap(inner: std::sync::Arc<$inner>) -> Self {
                $ty(inner)
            }
            fn inner(&self) -> &std::sync::Arc<$inner> {
                &self.0
            }
        }
    };
}
pub(crate) use impl_handle;

/// What a child handle holds: its host, weakly, and its own value.
pub(crate) struct Child<T> {
    host: Weak<Host>,
    pub(crate) value: T,
}

impl<T> Child<T> {
    pub(crate) fn new(host: &Arc<Host>, value: T) -> Child<T> {
        Child {
            host: Arc::downgrade(host),
            value,
        }
    }
}

/// The value behind a handle argument, as the call's own reference.
pub(crate) fn handle_arg<H: Handle>(p: *const H) -> Result<Arc<H::Inner>> {
    unsafe { p.as_ref() }
        .map(|h| h.inner().clone())
        .ok_or_else(|| Error::invalid(format!("{} is NULL", H::NAME)))
}

/// A child handle argument with its host, which must not have been freed.
pub(crate) fn child_arg<T, H: Handle<Inner = Child<T>>>(
    p: *const H,
) -> Result<(Arc<Host>, Arc<Child<T>>)> {
    let child = handle_arg(p)?;
    let host = child.host.upgrade().ok_or_else(|| {
        Error::new(
            ErrorKind::FailedPrecondition,
            format!("the kcsi_host this {} belongs to was freed", H::NAME),
        )
    })?;
    Ok((host, child))
}

/// Hands a new handle to the caller through a slot checked with `out_arg`.
pub(crate) fn write_handle<H: Handle>(out: *mut *mut H, inner: H::Inner) {
    let raw = Box::into_raw(Box::new(H::wrap(Arc::new(inner))));
    unsafe { *out = raw };
}

/// Frees a handle an export handed out; NULL is a no-op. Its value lives on while a call on it
/// is still running (the call holds its own `Arc`).
pub(crate) fn free_handle<H: Handle>(p: *mut H) {
    if !p.is_null() {
        drop(unsafe { Box::from_raw(p) });
    }
}
