//! Mounter and unmounter handles (NodePublishVolume / NodeUnpublishVolume).

use std::ffi::c_char;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::boundary::{guard, json_arg, opt_json_arg, out_arg, str_arg, write_json, write_string};
use super::catch::guard_value;
use super::error::kcsi_error;
use super::handle::{child_arg, free_handle, handle_arg, impl_handle, write_handle, Child};
use super::host::kcsi_host;
use super::kcsi_result;
use crate::runtime;
use crate::spec::VolumeSpec;
use crate::volume::mounter::{Mounter, MounterArgs, Unmounter};

/// One volume of one pod to publish. Free with `kcsi_mounter_free`.
pub struct kcsi_mounter(Arc<Child<Mounter>>);
impl_handle!(kcsi_mounter, "mounter", Child<Mounter>);

/// One published volume of one pod to tear down. Free with `kcsi_unmounter_free`.
pub struct kcsi_unmounter(Arc<Child<Unmounter>>);
impl_handle!(kcsi_unmounter, "unmounter", Child<Unmounter>);

/// Creates a mounter for `spec_json` (`{"persistentVolume": <PV>, "readOnly": bool}`,
/// `{"volume": <Volume>}`, or the plain form below) in the pod `pod_json` (a core/v1 Pod; `metadata.uid` required). Does
/// no I/O and needs no registered driver. Unsafe pod UIDs or volume names are
/// `KCSI_ERR_INVALID_ARGUMENT`. On success `*out` receives a mounter the caller frees with
/// `kcsi_mounter_free`; on error it is unchanged.
///
/// Plain form, for hosts without Kubernetes objects (every call that takes `spec_json` accepts
/// it): `{"csi": {"driver", "volumeHandle", "specName", "volumeAttributes": {..},
/// "accessMode": "ReadWriteOnce", "volumeMode": "Filesystem"|"Block", "fsType",
/// "mountOptions": [..], "readOnly": bool, "nodeStageSecrets"/"nodePublishSecrets"/
/// "nodeExpandSecrets": {..} or "secretsFile": "/abs/path.json", "publishContext": {..}},
/// "readOnly": bool}`. It acts as the PersistentVolume named `specName` with that CSI source
/// (same paths, same `vol_data.json`). The secrets file uses csi-sanity's keys
/// (`{"NodeStageVolumeSecret": {..}, "NodePublishVolumeSecret": {..}, ...}`) and is read at
/// each operation (unreadable: transient). `publishContext` stands in for the
/// VolumeAttachment when the CSIDriver requires attach.
#[no_mangle]
pub extern "C" fn kcsi_mounter_new(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    pod_json: *const c_char,
    out: *mut *mut kcsi_mounter,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        let pod: Pod = json_arg(pod_json, "pod_json")?;
        out_arg(out, "out")?;
        let mounter = Mounter::new(&host, spec, pod)?;
        write_handle(out, Child::new(&host, mounter));
        Ok(())
    })
}

/// The mount path the volume is published at:
/// `<rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<spec>/mount`. Caller frees `*path_out`
/// with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_mounter_path(
    m: *mut kcsi_mounter,
    path_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (_, m) = child_arg(m)?;
        out_arg(path_out, "path_out")?;
        write_string(path_out, &m.value.path().to_string_lossy());
        Ok(())
    })
}

/// Publishes the volume (the kubelet's `SetUp`): NodePublishVolume into the mount path, with
/// `vol_data.json` written beside it. `args_json` (NULL = none): `{"fsGroup": int,
/// "fsGroupChangePolicy": "Always"|"OnRootMismatch", "seLinuxLabel": string, "reconstructedVolume":
/// bool, "isRemount": bool}`, all optional,
/// unknown keys rejected. Errors carry the class the kubelet acts on: transient (driver not
/// registered, Kubernetes lookups), uncertain (the driver may still be publishing), or final
/// (then the directory is removed unless something is mounted on it, or the volume is a
/// reconstructed one or a remount, which a pod may already use). A symlink anywhere below
/// the root on the way to the mount path is refused (`KCSI_ERR_FAILED_PRECONDITION`, naming
/// it) before anything is written there or sent to the driver. Concurrent calls on the same
/// volume run one after the other.
/// Nullable: args_json.
#[no_mangle]
pub extern "C" fn kcsi_mounter_set_up(
    m: *mut kcsi_mounter,
    args_json: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, m) = child_arg(m)?;
        let args: MounterArgs = opt_json_arg(args_json, "args_json")?;
        runtime::block_on(|| m.value.set_up(&host, &args))?
    })
}

/// The published volume's usage from NodeGetVolumeStats as JSON: `{"time", "capacityBytes",
/// "availableBytes", "usedBytes", "inodes", "inodesFree", "inodesUsed"}`, plus `"abnormal"` and
/// `"message"` when the gate `CSIVolumeHealth` is on and the driver reports volume conditions.
/// `KCSI_ERR_NOT_SUPPORTED` when the driver lacks GET_VOLUME_STATS. Caller frees
/// `*metrics_json_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_mounter_metrics(
    m: *mut kcsi_mounter,
    metrics_json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, m) = child_arg(m)?;
        out_arg(metrics_json_out, "metrics_json_out")?;
        let metrics = runtime::block_on(|| m.value.metrics(&host))??;
        write_json(metrics_json_out, &metrics, "metrics")
    })
}

/// Frees a mounter (the volume stays published). Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_mounter_free(m: *mut kcsi_mounter) {
    guard_value((), || free_handle(m))
}

/// Creates an unmounter for the volume `spec_name` of pod `pod_uid` from the `vol_data.json`
/// its SetUp wrote (so it works after a restart, with a new host). A missing file is
/// `KCSI_ERR_NOT_FOUND` — unless the volume dir holds only kcsi's temp files (an interrupted
/// SetUp or TearDown): then the unmounter's tear-down just removes them. A corrupt file is
/// `KCSI_ERR_IO`; unsafe names `KCSI_ERR_INVALID_ARGUMENT`; a symlink below the root on the way
/// `KCSI_ERR_FAILED_PRECONDITION`.
/// On success `*out` receives an unmounter the caller frees with `kcsi_unmounter_free`.
#[no_mangle]
pub extern "C" fn kcsi_unmounter_new(
    h: *mut kcsi_host,
    spec_name: *const c_char,
    pod_uid: *const c_char,
    out: *mut *mut kcsi_unmounter,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let spec_name = str_arg(spec_name, "spec_name")?;
        let pod_uid = str_arg(pod_uid, "pod_uid")?;
        out_arg(out, "out")?;
        let unmounter = Unmounter::new(&host, spec_name, pod_uid)?;
        write_handle(out, Child::new(&host, unmounter));
        Ok(())
    })
}

/// Tears the volume down (the kubelet's `TearDown`): NodeUnpublishVolume, then removes the
/// mount dir and `vol_data.json` unless the target is still mounted. A driver that is not
/// registered is transient; a failed NodeUnpublishVolume is final.
#[no_mangle]
pub extern "C" fn kcsi_unmounter_tear_down(
    u: *mut kcsi_unmounter,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, u) = child_arg(u)?;
        runtime::block_on(|| u.value.tear_down(&host))?
    })
}

/// Frees an unmounter. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_unmounter_free(u: *mut kcsi_unmounter) {
    guard_value((), || free_handle(u))
}
