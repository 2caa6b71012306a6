//! Reconstruction exports: the spec of a volume (filesystem or block) found on disk after a
//! restart.

use std::ffi::c_char;
use std::path::Path;

use super::boundary::{guard, out_arg, str_arg, write_json_sorted};
use super::error::kcsi_error;
use super::handle::handle_arg;
use super::host::kcsi_host;
use super::kcsi_result;
use crate::volume::{block, reconstruct};

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
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let volume_name = str_arg(volume_name, "volume_name")?;
        let mount_path = str_arg(mount_path, "mount_path")?;
        out_arg(reconstructed_json_out, "reconstructed_json_out")?;
        let value = reconstruct::construct_volume_spec(&host, volume_name, Path::new(mount_path))?;
        write_json_sorted(reconstructed_json_out, &value, "the reconstructed spec")
    })
}

/// Rebuilds a block volume's spec after a restart from its `data/vol_data.json`:
/// `{"persistentVolume": <PV with name, csi.driver, csi.volumeHandle, volumeMode Block>,
/// "readOnly": false}`. `pod_uid` and `map_path` are only logged. Caller frees
/// `*spec_json_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_construct_block_volume_spec(
    h: *mut kcsi_host,
    pod_uid: *const c_char,
    spec_name: *const c_char,
    map_path: *const c_char,
    spec_json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let pod_uid = str_arg(pod_uid, "pod_uid")?;
        let spec_name = str_arg(spec_name, "spec_name")?;
        let map_path = str_arg(map_path, "map_path")?;
        out_arg(spec_json_out, "spec_json_out")?;
        let spec =
            block::construct_block_volume_spec(&host, pod_uid, spec_name, Path::new(map_path))?;
        write_json_sorted(spec_json_out, &spec, "the reconstructed spec")
    })
}
