//! Block volume exports: mapper (NodeStage / NodePublish with block access), unmapper, and
//! block spec reconstruction.

use std::ffi::c_char;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::boundary::{
    guard, json_arg, opt_str_arg, out_arg, str_arg, write_json, write_json_sorted, write_string,
};
use super::catch::guard_value;
use super::error::kcsi_error;
use super::handle::{child_arg, free_handle, handle_arg, impl_handle, write_handle, Child};
use super::host::kcsi_host;
use super::kcsi_result;
use crate::runtime;
use crate::spec::VolumeSpec;
use crate::volume::block::{BlockMapper, BlockUnmapper};

/// A block volume mapper for one pod. Free with `kcsi_block_mapper_free`.
pub struct kcsi_block_mapper(Arc<Child<BlockMapper>>);
impl_handle!(kcsi_block_mapper, "block mapper", Child<BlockMapper>);

/// A block volume unmapper. Free with `kcsi_block_unmapper_free`.
pub struct kcsi_block_unmapper(Arc<Child<BlockUnmapper>>);
impl_handle!(kcsi_block_unmapper, "block unmapper", Child<BlockUnmapper>);

/// Creates a block mapper for a `volumeMode: Block` PersistentVolume (or plain) spec and a pod (core/v1
/// Pod JSON with `metadata.uid`), and writes
/// `<rootDir>/plugins/kubernetes.io/csi/volumeDevices/<spec>/data/vol_data.json`. On success
/// `*out` receives a handle the caller frees with `kcsi_block_mapper_free`.
#[no_mangle]
pub extern "C" fn kcsi_block_mapper_new(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    pod_json: *const c_char,
    out: *mut *mut kcsi_block_mapper,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        let pod: Pod = json_arg(pod_json, "pod_json")?;
        out_arg(out, "out")?;
        let mapper = runtime::block_on(|| BlockMapper::new(&host, spec, pod))??;
        write_handle(out, Child::new(&host, mapper));
        Ok(())
    })
}

/// The mapper's paths as JSON: `{"globalMapPath", "stagingPath", "publishDir", "publishPath",
/// "podDeviceMapPath", "podDeviceMapName", "volumeDataDir", "metricsPath"}`. Caller frees
/// `*paths_json_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_block_mapper_paths(
    m: *mut kcsi_block_mapper,
    paths_json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (_, mapper) = child_arg(m)?;
        out_arg(paths_json_out, "paths_json_out")?;
        write_json_sorted(
            paths_json_out,
            &mapper.value.paths(),
            "the block mapper's paths",
        )?;
        Ok(())
    })
}

/// SetUpDevice: NodeStageVolume with block access at the staging path, when the driver has
/// STAGE_UNSTAGE_VOLUME. `*staging_path_out` receives the staging path, or "" when the driver
/// does not stage (caller frees it with `kcsi_string_free`). A final error removes the
/// volume's files (vol_data.json included).
#[no_mangle]
pub extern "C" fn kcsi_block_mapper_set_up_device(
    m: *mut kcsi_block_mapper,
    staging_path_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, mapper) = child_arg(m)?;
        out_arg(staging_path_out, "staging_path_out")?;
        let staging = runtime::block_on(|| mapper.value.set_up_device(&host))??;
        write_string(
            staging_path_out,
            &staging.map(|p| p.display().to_string()).unwrap_or_default(),
        );
        Ok(())
    })
}

/// MapPodDevice: NodePublishVolume with block access; the driver creates the device file at
/// the publish path, written to `*publish_path_out` (caller frees it with `kcsi_string_free`).
#[no_mangle]
pub extern "C" fn kcsi_block_mapper_map_pod_device(
    m: *mut kcsi_block_mapper,
    publish_path_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, mapper) = child_arg(m)?;
        out_arg(publish_path_out, "publish_path_out")?;
        let path = runtime::block_on(|| mapper.value.map_pod_device(&host))??;
        write_string(publish_path_out, &path.display().to_string());
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
    guard!(err_out, || {
        let (host, m) = child_arg(m)?;
        out_arg(metrics_json_out, "metrics_json_out")?;
        let metrics = runtime::block_on(|| m.value.metrics(&host))??;
        write_json(metrics_json_out, &metrics, "metrics")
    })
}

/// Frees a block mapper. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_block_mapper_free(m: *mut kcsi_block_mapper) {
    guard_value((), || free_handle(m))
}

/// Creates a block unmapper from the volume's `data/vol_data.json`. `pod_uid` may be "" to
/// only tear the device down (the kubelet's UnmountDevice has no pod). A missing file is
/// `KCSI_ERR_NOT_FOUND`, unless an interrupted teardown left only kcsi's temp files (no
/// staging path): then the handle's teardown just removes them. On success `*out` receives a
/// handle the caller frees with `kcsi_block_unmapper_free`.
#[no_mangle]
pub extern "C" fn kcsi_block_unmapper_new(
    h: *mut kcsi_host,
    spec_name: *const c_char,
    pod_uid: *const c_char,
    out: *mut *mut kcsi_block_unmapper,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, |export| {
        let host = handle_arg(h)?;
        host.node_only(export)?;
        let spec_name = str_arg(spec_name, "spec_name")?;
        let pod_uid = str_arg(pod_uid, "pod_uid")?;
        out_arg(out, "out")?;
        let unmapper = BlockUnmapper::new(&host, spec_name, pod_uid)?;
        write_handle(out, Child::new(&host, unmapper));
        Ok(())
    })
}

/// UnmapPodDevice: NodeUnpublishVolume of the pod's publish path. Needs an unmapper made with
/// a pod UID.
#[no_mangle]
pub extern "C" fn kcsi_block_unmapper_unmap_pod_device(
    u: *mut kcsi_block_unmapper,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, unmapper) = child_arg(u)?;
        runtime::block_on(|| unmapper.value.unmap_pod_device(&host))?
    })
}

/// TearDownDevice: NodeUnstageVolume when the staging path exists, then removal of the
/// volume's leftover files without crossing a mount point. `global_map_path` and `device_path`
/// (either may be NULL) are only logged, as upstream only logs them.
/// Nullable: global_map_path, device_path.
#[no_mangle]
pub extern "C" fn kcsi_block_unmapper_tear_down_device(
    u: *mut kcsi_block_unmapper,
    global_map_path: *const c_char,
    device_path: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let (host, unmapper) = child_arg(u)?;
        let map_path = opt_str_arg(global_map_path, "global_map_path")?.unwrap_or("");
        let device = opt_str_arg(device_path, "device_path")?.unwrap_or("");
        runtime::block_on(|| {
            unmapper
                .value
                .tear_down_device(&host, Path::new(map_path), device)
        })?
    })
}

/// Frees a block unmapper. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_block_unmapper_free(u: *mut kcsi_block_unmapper) {
    guard_value((), || free_handle(u))
}
