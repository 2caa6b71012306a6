//! Registration exports: the kubelet plugin watcher's CSI handler.

use std::ffi::c_char;
use std::time::Duration;

use super::boundary::{guard, out_arg, str_arg, str_array, write_json_sorted};
use super::error::kcsi_error;
use super::handle::handle_arg;
use super::host::{kcsi_host, node_arg};
use super::kcsi_result;
use crate::error::Result;
use crate::node::registration;
use crate::runtime;

/// The arguments `kcsi_validate_plugin` and `kcsi_register_plugin` share.
fn plugin_args<'a>(
    name: *const c_char,
    endpoint: *const c_char,
    versions: *const *const c_char,
    versions_len: usize,
) -> Result<(&'a str, &'a str, Vec<String>)> {
    Ok((
        str_arg(name, "name")?,
        str_arg(endpoint, "endpoint")?,
        str_array(versions, versions_len, "versions")?,
    ))
}

/// Checks a driver's name, endpoint and supported versions as the kubelet's `ValidatePlugin`
/// does, without registering anything. `versions` is an array of `versions_len` strings.
#[no_mangle]
pub extern "C" fn kcsi_validate_plugin(
    h: *mut kcsi_host,
    name: *const c_char,
    endpoint: *const c_char,
    versions: *const *const c_char,
    versions_len: usize,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let (name, endpoint, versions) = plugin_args(name, endpoint, versions, versions_len)?;
        registration::validate(&host, name, endpoint, &versions)
    })
}

/// Registers a CSI driver as the kubelet's `RegisterPlugin` does: stores it, calls
/// `NodeGetInfo` over its socket and publishes the node info (with a kubeconfig: Node and
/// CSINode). Any failure rolls the registration back. Blocks for at most `timeout_ms`
/// milliseconds (`<= 0`: the host's timeout).
#[no_mangle]
pub extern "C" fn kcsi_register_plugin(
    h: *mut kcsi_host,
    name: *const c_char,
    endpoint: *const c_char,
    versions: *const *const c_char,
    versions_len: usize,
    timeout_ms: i64,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        handle_arg(h)?.node_only(export)?;
        let node = node_arg(h)?;
        let (name, endpoint, versions) = plugin_args(name, endpoint, versions, versions_len)?;
        let timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms as u64));
        runtime::block_on(|| registration::register(&node, name, endpoint, &versions, timeout))?
            .map(drop)
    })
}

/// Deregisters a CSI driver as the kubelet's `DeRegisterPlugin` does and removes its node
/// info. `KCSI_ERR_NOT_FOUND` when no driver of that name is registered (node info is still
/// cleaned up).
#[no_mangle]
pub extern "C" fn kcsi_deregister_plugin(
    h: *mut kcsi_host,
    name: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        handle_arg(h)?.node_only(export)?;
        let node = node_arg(h)?;
        let name = str_arg(name, "name")?;
        runtime::block_on(|| registration::deregister(&node, name))?
    })
}

/// The registered drivers as a JSON array of `{"name", "endpoint", "highestSupportedVersion",
/// "nodeId", "maxVolumesPerNode", "topology"}`, sorted by name. Caller frees
/// `*drivers_json_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_list_drivers(
    h: *mut kcsi_host,
    drivers_json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        out_arg(drivers_json_out, "drivers_json_out")?;
        write_json_sorted(drivers_json_out, &host.drivers_status(), "the driver list")?;
        Ok(())
    })
}
