//! Reconstruction export: the spec of a volume found mounted after a restart.

use std::ffi::c_char;

use super::boundary::{guard, out_arg, str_arg, write_string};
use super::error::kcsi_error;
use super::host::{host_arg, kcsi_host};
use super::kcsi_result;
use crate::volume::reconstruct;

/// Rebuilds the spec of a mounted volume from `<mount_path>/vol_data.json`, `mount_path` being
/// the per-volume dir `<rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<spec>` (anything outside
/// `<rootDir>/pods/` is `KCSI_ERR_INVALID_ARGUMENT`). `*reconstructed_json_out` receives
/// `{"spec": <spec_json as the other calls take it>, "seLinuxMountContext": "<label or empty>"}`:
/// a PersistentVolume (volumeMode Filesystem) with driver and handle, or for an ephemeral volume
/// an inline Volume with its driver. A missing file is `KCSI_ERR_NOT_FOUND`. Caller frees the
/// string with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_construct_volume_spec(
    h: *mut kcsi_host,
    volume_name: *const c_char,
    mount_path: *const c_char,
    reconstructed_json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard("kcsi_construct_volume_spec", err_out, || {
        let host = host_arg(h)?;
        let volume_name = str_arg(volume_name, "volume_name")?;
        let mount_path = str_arg(mount_path, "mount_path")?;
        out_arg(reconstructed_json_out, "reconstructed_json_out")?;
        let value = reconstruct::construct_volume_spec(host, volume_name, mount_path)?;
        write_string(reconstructed_json_out, &value.to_string());
        Ok(())
    })
}
