//! Attacher / device mounter exports (kubelet side: WaitForAttach, NodeStage, NodeUnstage).

use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

use super::boundary::{
    free_box, guard, guard_value, json_arg, opt_json_arg, out_arg, str_arg, write_string,
};
use super::error::kcsi_error;
use super::handle::{child_arg, handle_arg, impl_handle, write_handle, Child};
use super::host::kcsi_host;
use super::kcsi_result;
use crate::runtime;
use crate::spec::VolumeSpec;
use crate::volume::attacher::{self, MountDeviceArgs};

/// An attacher / device mounter of one host. Free with `kcsi_attacher_free`.
pub struct kcsi_attacher(Arc<Child<()>>);
impl_handle!(kcsi_attacher, "attacher", Child<()>);

/// Creates an attacher for host `h`. On success `*out` receives a handle the caller owns and
/// frees with `kcsi_attacher_free`; on error it is unchanged.
#[no_mangle]
pub extern "C" fn kcsi_attacher_new(
    h: *mut kcsi_host,
    out: *mut *mut kcsi_attacher,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        out_arg(out, "out")?;
        write_handle(out, Child::new(&host, ()));
        Ok(())
    })
}

/// Checks once that the volume's VolumeAttachment (`csi-<sha256(handle+driver+node)>`) is
/// attached, and writes its name to `*device_path_out` (caller frees it with
/// `kcsi_string_free`). Not attached yet or unreadable: transient; attach error (its message
/// verbatim) or being deleted: final. `timeout_ms <= 0`: the host's timeout. A plain spec with
/// a `publishContext` counts as attached without a read.
#[no_mangle]
pub extern "C" fn kcsi_attacher_wait_for_attach(
    a: *mut kcsi_attacher,
    spec_json: *const c_char,
    timeout_ms: i64,
    device_path_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, _) = child_arg(a)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        out_arg(device_path_out, "device_path_out")?;
        let timeout = if timeout_ms > 0 {
            Duration::from_millis(timeout_ms as u64)
        } else {
            host.config.timeout
        };
        let name = runtime::block_on(attacher::wait_for_attach(&host, &spec, timeout))??;
        write_string(device_path_out, &name);
        Ok(())
    })
}

/// The global (staging) mount path of a PersistentVolume spec:
/// `<rootDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`. Caller frees
/// `*path_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_attacher_device_mount_path(
    a: *mut kcsi_attacher,
    spec_json: *const c_char,
    path_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, _) = child_arg(a)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        out_arg(path_out, "path_out")?;
        write_string(
            path_out,
            &attacher::device_mount_path(&host, &spec)?
                .display()
                .to_string(),
        );
        Ok(())
    })
}

/// MountDevice: creates `device_mount_path` (mode 0750), records `vol_data.json` next to it
/// and, when the driver has STAGE_UNSTAGE_VOLUME, calls NodeStageVolume there. `args_json`
/// (NULL = none): `{"fsGroup": int, "seLinuxLabel": string}`. Errors are classed as the
/// kubelet's: uncertain when the driver may still be staging, transient when nothing changed.
/// Nullable: args_json.
#[no_mangle]
pub extern "C" fn kcsi_attacher_mount_device(
    a: *mut kcsi_attacher,
    spec_json: *const c_char,
    device_mount_path: *const c_char,
    args_json: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, _) = child_arg(a)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        let path = str_arg(device_mount_path, "device_mount_path")?;
        let args: MountDeviceArgs = opt_json_arg(args_json, "args_json")?;
        runtime::block_on(attacher::mount_device(&host, &spec, path, &args))?
    })
}

/// UnmountDevice: NodeUnstageVolume (when the driver has STAGE_UNSTAGE_VOLUME) with what the
/// `vol_data.json` next to `device_mount_path` recorded, then removes the global mount dir.
/// Succeeds without NodeUnstageVolume when that file is missing (as upstream), removing the
/// global dir only when it holds nothing but kcsi's temp files (an interrupted MountDevice or
/// UnmountDevice); a `globalmount` there is kept for `kcsi_list_device_mounts` and
/// `kcsi_unmount_device_by_handle`. A corrupt file is an error. A symlink below the root on the
/// way is `KCSI_ERR_FAILED_PRECONDITION`, and nothing is done.
#[no_mangle]
pub extern "C" fn kcsi_attacher_unmount_device(
    a: *mut kcsi_attacher,
    device_mount_path: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, _) = child_arg(a)?;
        let path = str_arg(device_mount_path, "device_mount_path")?;
        runtime::block_on(attacher::unmount_device(&host, path))?
    })
}

/// Frees an attacher. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_attacher_free(a: *mut kcsi_attacher) {
    guard_value((), || free_box(a))
}
