//! The host's Prometheus metrics export.

use std::ffi::c_char;

use super::boundary::{guard, out_arg, write_string};
use super::error::kcsi_error;
use super::handle::handle_arg;
use super::host::kcsi_host;
use super::kcsi_result;

/// The host's metrics in the Prometheus text exposition format (version 0.0.4), ready to
/// serve on a `/metrics` endpoint: `csi_operations_seconds` (as upstream's kubelet: labels
/// `driver_name`, `method_name`, `grpc_status_code`, `migrated`), and kcsi's own
/// `kcsi_driver_registrations_total`, `kcsi_registered_drivers`, `kcsi_api_requests_total`.
/// Each host has its own registry. Caller frees `*text_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_host_metrics(
    h: *mut kcsi_host,
    text_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        out_arg(text_out, "text_out")?;
        write_string(text_out, &host.metrics_text()?);
        Ok(())
    })
}
