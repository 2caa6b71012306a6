//! Device mounts kcsi finds on disk, and UnmountDevice by driver and handle (beyond upstream,
//! kubernetes/kubernetes#85476: staged volumes no pod uses can be found and unstaged after a
//! restart, even when their `vol_data.json` is gone).

use std::ffi::c_char;

use super::boundary::{guard, out_arg, str_arg, write_json};
use super::error::kcsi_error;
use super::handle::handle_arg;
use super::host::kcsi_host;
use super::kcsi_result;
use crate::disk::inventory;
use crate::runtime;
use crate::volume::attacher;

/// The device mounts (staged volumes) below `<rootDir>/plugins/kubernetes.io/csi` as a JSON
/// array sorted by path, one object per global mount dir
/// (`<driver>/<sha256(handle)>/globalmount`, `"kind": "filesystem"`) and per block volume
/// (its staging path `volumeDevices/staging/<spec>`, also when only its
/// `volumeDevices/<spec>/data` is left; `"kind": "block"`): `{"kind", "driver",
/// "volumeHandle", "specName", "deviceMountPath", "mounted", "volumeDataFile", "volumeData",
/// "volumeDataError"}`. `volumeData` is the file's keys, or null with `volumeDataError` saying
/// why (missing, corrupt); `driver` of a filesystem entry comes from its path, so it is known
/// even without the file. Symlinks are skipped, never followed. Caller frees `*mounts_json_out` with
/// `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_list_device_mounts(
    h: *mut kcsi_host,
    mounts_json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        out_arg(mounts_json_out, "mounts_json_out")?;
        let staged = inventory::walk(host.files())?.staged;
        write_json(mounts_json_out, &staged, "device mounts")
    })
}

/// UnmountDevice of the volume `volume_handle` of `driver`, for when its
/// `vol_data.json` may be gone: NodeUnstageVolume (when the driver has STAGE_UNSTAGE_VOLUME) at
/// `<rootDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`, then removal
/// of the global mount dir, as `kcsi_attacher_unmount_device`. A `vol_data.json` that is there
/// but names another driver or handle is `KCSI_ERR_FAILED_PRECONDITION`; an unregistered driver
/// is `KCSI_ERR_NOT_FOUND` (transient). When there is no such global mount dir but a block
/// volume (`kcsi_list_device_mounts`' `"kind": "block"`) records the driver and handle, that
/// volume is torn down as `kcsi_block_unmapper_tear_down_device` does.
#[no_mangle]
pub extern "C" fn kcsi_unmount_device_by_handle(
    h: *mut kcsi_host,
    driver: *const c_char,
    volume_handle: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let driver = str_arg(driver, "driver")?;
        let volume_handle = str_arg(volume_handle, "volume_handle")?;
        runtime::block_on(|| attacher::unmount_device_by_handle(&host, driver, volume_handle))?
    })
}
