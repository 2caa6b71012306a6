//! Attacher / device mounter exports: the kubelet side (WaitForAttach, NodeStage, NodeUnstage)
//! and, on a controller host, the attach/detach controller's (Attach, Detach, VolumesAreAttached).

use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::boundary::{guard, json_arg, opt_json_arg, out_arg, str_arg, write_json, write_string};
use super::catch::guard_value;
use super::error::kcsi_error;
use super::handle::{child_arg, free_handle, handle_arg, impl_handle, write_handle, Child};
use super::host::kcsi_host;
use super::kcsi_result;
use crate::error::{Error, Result};
use crate::host::Host;
use crate::runtime;
use crate::spec::VolumeSpec;
use crate::volume::attach_detach;
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
    guard!(err_out, |export| {
        let (host, _) = child_arg(a)?;
        host.node_only(export)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        out_arg(device_path_out, "device_path_out")?;
        let timeout = timeout_arg(&host, timeout_ms);
        let name = runtime::block_on(|| attacher::wait_for_attach(&host, &spec, timeout))??;
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
    guard!(err_out, |export| {
        let (host, _) = child_arg(a)?;
        host.node_only(export)?;
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
    guard!(err_out, |export| {
        let (host, _) = child_arg(a)?;
        host.node_only(export)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        let path = str_arg(device_mount_path, "device_mount_path")?;
        let args: MountDeviceArgs = opt_json_arg(args_json, "args_json")?;
        runtime::block_on(|| attacher::mount_device(&host, &spec, Path::new(path), &args))?
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
    guard!(err_out, |export| {
        let (host, _) = child_arg(a)?;
        host.node_only(export)?;
        let path = str_arg(device_mount_path, "device_mount_path")?;
        runtime::block_on(|| attacher::unmount_device(&host, Path::new(path)))?
    })
}

/// `timeout_ms`, or the host's timeout when it is `<= 0`.
fn timeout_arg(host: &Host, timeout_ms: i64) -> Duration {
    if timeout_ms > 0 {
        Duration::from_millis(timeout_ms as u64).min(crate::config::MAX_TIMEOUT)
    } else {
        host.config().timeout
    }
}

/// Controller hosts only (`"role": "controller"`). Attach: creates the VolumeAttachment
/// `csi-<sha256(handle+driver+node)>` for a PersistentVolume spec on `node_name` (its
/// `spec.source` the PV's name, or with `"inlineVolumeSpecForCSIMigration": true` the PV's
/// spec; one that exists is kept) and waits on the host's watch until the external-attacher
/// sets `status.attached` (the name is written to `*attach_id_out`, freed with
/// `kcsi_string_free`) or `status.attachError` (final `KCSI_ERR_DRIVER`, its message verbatim,
/// its `errorCode` as the gRPC code), or until `timeout_ms` passes (transient
/// `KCSI_ERR_TIMEOUT`, "timed out waiting for external-attacher of <driver> CSI driver to
/// attach volume <handle>"). `timeout_ms <= 0`: the host's timeout. On a node host:
/// `KCSI_ERR_NOT_SUPPORTED` ("attaching volumes from the kubelet is not supported").
#[no_mangle]
pub extern "C" fn kcsi_attacher_attach(
    a: *mut kcsi_attacher,
    spec_json: *const c_char,
    node_name: *const c_char,
    timeout_ms: i64,
    attach_id_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, _) = child_arg(a)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        let node = str_arg(node_name, "node_name")?;
        out_arg(attach_id_out, "attach_id_out")?;
        let timeout = timeout_arg(&host, timeout_ms);
        let name = runtime::block_on(|| attach_detach::attach(&host, &spec, node, timeout))??;
        write_string(attach_id_out, &name);
        Ok(())
    })
}

/// Controller hosts only. Detach: `volume_name` is `<driver>^<handle>` (what
/// `kcsi_get_volume_name` returns); deletes that volume's VolumeAttachment on `node_name` and
/// waits until it is gone (the external-attacher called ControllerUnpublishVolume).
/// `status.detachError` is a final `KCSI_ERR_DRIVER`; an attachment that does not exist is
/// `KCSI_OK`; the timeout is a transient `KCSI_ERR_TIMEOUT`. `timeout_ms <= 0`: the host's
/// timeout.
#[no_mangle]
pub extern "C" fn kcsi_attacher_detach(
    a: *mut kcsi_attacher,
    volume_name: *const c_char,
    node_name: *const c_char,
    timeout_ms: i64,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, _) = child_arg(a)?;
        let volume = str_arg(volume_name, "volume_name")?;
        let node = str_arg(node_name, "node_name")?;
        let timeout = timeout_arg(&host, timeout_ms);
        runtime::block_on(|| attach_detach::detach(&host, volume, node, timeout))?
    })
}

/// The specs of a JSON array, each named by its index in errors.
fn spec_array(specs_json: *const c_char) -> Result<Vec<VolumeSpec>> {
    let value: serde_json::Value = json_arg(specs_json, "specs_json")?;
    let serde_json::Value::Array(items) = value else {
        return Err(Error::invalid(
            "specs_json is not a JSON array of volume specs",
        ));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            if item.is_null() {
                return Err(Error::invalid(format!(
                    "specs_json[{i}] is null (missing spec)"
                )));
            }
            serde_json::from_value(item)
                .map_err(|e| Error::invalid(format!("specs_json[{i}] is not valid: {e}")))
        })
        .collect()
}

/// Controller hosts only. VolumesAreAttached: `specs_json` is a JSON array of PersistentVolume
/// specs; `*json_out` (freed with `kcsi_string_free`) a JSON array of booleans in the same
/// order: whether each volume's VolumeAttachment on `node_name` has `status.attached`, read
/// from the host's watch (a GET when the watch lacks it). A driver whose CSIDriver says
/// `attachRequired: false` is attached; a failed lookup is not.
#[no_mangle]
pub extern "C" fn kcsi_attacher_volumes_are_attached(
    a: *mut kcsi_attacher,
    specs_json: *const c_char,
    node_name: *const c_char,
    json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, _) = child_arg(a)?;
        let specs = spec_array(specs_json)?;
        let node = str_arg(node_name, "node_name")?;
        out_arg(json_out, "json_out")?;
        let attached =
            runtime::block_on(|| attach_detach::volumes_are_attached(&host, &specs, node))??;
        write_json(json_out, &attached, "the attachment states")
    })
}

/// Frees an attacher. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_attacher_free(a: *mut kcsi_attacher) {
    guard_value((), || free_handle(a))
}
