//! Exports the kubelet's volume plugin interfaces need beyond the operations themselves:
//! the SELinux context-mount query and block-mapper metrics.

use std::ffi::c_char;

use super::block::{kcsi_block_mapper, mapper_arg};
use super::boundary::{guard, json_arg, out_arg, write_string, write_value};
use super::error::kcsi_error;
use super::host::{host_arg, kcsi_host};
use super::kcsi_result;
use crate::error::Error;
use crate::runtime;
use crate::spec::SpecHead;
use crate::volume::plugin;

/// Whether the volume may be mounted with `-o context=<label>` (the kubelet's
/// `SupportsSELinuxContextMount`): with the gate `SELinuxMountReadWriteOncePod`, the CSIDriver's
/// `seLinuxMount` (false when the driver has no CSIDriver object); false without the gate. A
/// spec without a CSI source is `KCSI_ERR_INVALID_ARGUMENT`.
#[no_mangle]
pub extern "C" fn kcsi_supports_selinux_context_mount(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    out: *mut bool,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard("kcsi_supports_selinux_context_mount", err_out, || {
        let host = host_arg(h)?;
        let spec: SpecHead = json_arg(spec_json, "spec_json")?;
        out_arg(out, "out")?;
        write_value(out, plugin::supports_selinux_context_mount(host, &spec)?);
        Ok(())
    })
}

/// The mapped block volume's usage from NodeGetVolumeStats on `<globalMapPath>/<podUID>`, as
/// JSON in `kcsi_mounter_metrics`' form. `KCSI_ERR_NOT_SUPPORTED` when the driver lacks
/// GET_VOLUME_STATS. Caller frees `*metrics_json_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_block_mapper_metrics(
    m: *mut kcsi_block_mapper,
    metrics_json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard("kcsi_block_mapper_metrics", err_out, || {
        let (host, m) = mapper_arg(m)?;
        out_arg(metrics_json_out, "metrics_json_out")?;
        let metrics = runtime::block_on(m.metrics(&host))??;
        let json = serde_json::to_string(&metrics)
            .map_err(|e| Error::internal(format!("cannot encode metrics: {e}")))?;
        write_string(metrics_json_out, &json);
        Ok(())
    })
}
