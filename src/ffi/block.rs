//! Block volume exports: mapper (NodeStage / NodePublish with block access), unmapper, and
//! block spec reconstruction.

use std::ffi::c_char;
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::Pod;

use super::boundary::{
    guard, guard_value, json_arg, opt_str_arg, out_arg, str_arg, write_string, write_value,
};
use super::error::kcsi_error;
use super::host::{host_arg, kcsi_host, upgrade};
use super::kcsi_result;
use crate::error::{Error, Result};
use crate::host::Host;
use crate::runtime;
use crate::spec::VolumeSpec;
use crate::volume::block::{self, BlockMapper, BlockUnmapper};

/// A block volume mapper for one pod. Free with `kcsi_block_mapper_free`.
pub struct kcsi_block_mapper {
    host: Weak<Host>,
    mapper: BlockMapper,
}

/// A block volume unmapper. Free with `kcsi_block_unmapper_free`.
pub struct kcsi_block_unmapper {
    host: Weak<Host>,
    unmapper: BlockUnmapper,
}

fn mapper_arg<'a>(m: *mut kcsi_block_mapper) -> Result<(Arc<Host>, &'a BlockMapper)> {
    let m = unsafe { m.as_ref() }.ok_or_else(|| Error::invalid("block mapper is NULL"))?;
    Ok((upgrade(&m.host)?, &m.mapper))
}

fn unmapper_arg<'a>(u: *mut kcsi_block_unmapper) -> Result<(Arc<Host>, &'a BlockUnmapper)> {
    let u = unsafe { u.as_ref() }.ok_or_else(|| Error::invalid("block unmapper is NULL"))?;
    Ok((upgrade(&u.host)?, &u.unmapper))
}

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
    guard("kcsi_block_mapper_new", err_out, || {
        let host = host_arg(h)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        let pod: Pod = json_arg(pod_json, "pod_json")?;
        out_arg(out, "out")?;
        let mapper = BlockMapper::new(host, spec, pod)?;
        write_value(
            out,
            Box::into_raw(Box::new(kcsi_block_mapper {
                host: Arc::downgrade(host),
                mapper,
            })),
        );
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
    guard("kcsi_block_mapper_paths", err_out, || {
        let (_, mapper) = mapper_arg(m)?;
        out_arg(paths_json_out, "paths_json_out")?;
        write_string(paths_json_out, &mapper.paths_json().to_string());
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
    guard("kcsi_block_mapper_set_up_device", err_out, || {
        let (host, mapper) = mapper_arg(m)?;
        out_arg(staging_path_out, "staging_path_out")?;
        let staging = runtime::block_on(mapper.set_up_device(&host))??;
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
    guard("kcsi_block_mapper_map_pod_device", err_out, || {
        let (host, mapper) = mapper_arg(m)?;
        out_arg(publish_path_out, "publish_path_out")?;
        let path = runtime::block_on(mapper.map_pod_device(&host))??;
        write_string(publish_path_out, &path.display().to_string());
        Ok(())
    })
}

/// Frees a block mapper. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_block_mapper_free(m: *mut kcsi_block_mapper) {
    guard_value((), || {
        if !m.is_null() {
            drop(unsafe { Box::from_raw(m) });
        }
    })
}

/// Creates a block unmapper from the volume's `data/vol_data.json`. `pod_uid` may be "" to
/// only tear the device down (the kubelet's UnmountDevice has no pod). On success `*out`
/// receives a handle the caller frees with `kcsi_block_unmapper_free`.
#[no_mangle]
pub extern "C" fn kcsi_block_unmapper_new(
    h: *mut kcsi_host,
    spec_name: *const c_char,
    pod_uid: *const c_char,
    out: *mut *mut kcsi_block_unmapper,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard("kcsi_block_unmapper_new", err_out, || {
        let host = host_arg(h)?;
        let spec_name = str_arg(spec_name, "spec_name")?;
        let pod_uid = str_arg(pod_uid, "pod_uid")?;
        out_arg(out, "out")?;
        let unmapper = BlockUnmapper::new(host, spec_name, pod_uid)?;
        write_value(
            out,
            Box::into_raw(Box::new(kcsi_block_unmapper {
                host: Arc::downgrade(host),
                unmapper,
            })),
        );
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
    guard("kcsi_block_unmapper_unmap_pod_device", err_out, || {
        let (host, unmapper) = unmapper_arg(u)?;
        runtime::block_on(unmapper.unmap_pod_device(&host))?
    })
}

/// TearDownDevice: NodeUnstageVolume when the staging path exists, then removal of the
/// volume's leftover files without crossing a mount point. `global_map_path` and `device_path`
/// (either may be NULL) are only logged, as upstream only logs them.
#[no_mangle]
pub extern "C" fn kcsi_block_unmapper_tear_down_device(
    u: *mut kcsi_block_unmapper,
    global_map_path: *const c_char,
    device_path: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard("kcsi_block_unmapper_tear_down_device", err_out, || {
        let (host, unmapper) = unmapper_arg(u)?;
        let map_path = opt_str_arg(global_map_path, "global_map_path")?.unwrap_or("");
        let device = opt_str_arg(device_path, "device_path")?.unwrap_or("");
        tracing::debug!(
            "{}",
            csi_log!("blockMapper.TearDownDevice [mapPath={map_path}, devicePath={device}]")
        );
        runtime::block_on(unmapper.tear_down_device(&host))?
    })
}

/// Frees a block unmapper. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_block_unmapper_free(u: *mut kcsi_block_unmapper) {
    guard_value((), || {
        if !u.is_null() {
            drop(unsafe { Box::from_raw(u) });
        }
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
    guard("kcsi_construct_block_volume_spec", err_out, || {
        let host = host_arg(h)?;
        let pod_uid = str_arg(pod_uid, "pod_uid")?;
        let spec_name = str_arg(spec_name, "spec_name")?;
        let map_path = str_arg(map_path, "map_path")?;
        out_arg(spec_json_out, "spec_json_out")?;
        let spec = block::construct_block_volume_spec(host, pod_uid, spec_name, map_path)?;
        write_string(spec_json_out, &spec.to_string());
        Ok(())
    })
}
