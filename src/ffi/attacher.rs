//! Attacher / device mounter exports (kubelet side: WaitForAttach, NodeStage, NodeUnstage).

use std::ffi::c_char;
use std::sync::Weak;
use std::time::Duration;

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
use crate::volume::attacher::{self, MountDeviceArgs};

/// An attacher / device mounter of one host. Free with `kcsi_attacher_free`.
pub struct kcsi_attacher {
    host: Weak<Host>,
}

fn attacher_arg<'a>(a: *mut kcsi_attacher) -> Result<&'a kcsi_attacher> {
    unsafe { a.as_ref() }.ok_or_else(|| Error::invalid("attacher is NULL"))
}

/// Creates an attacher for host `h`. On success `*out` receives a handle the caller owns and
/// frees with `kcsi_attacher_free`; on error it is unchanged.
#[no_mangle]
pub extern "C" fn kcsi_attacher_new(
    h: *mut kcsi_host,
    out: *mut *mut kcsi_attacher,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard("kcsi_attacher_new", err_out, || {
        let host = host_arg(h)?;
        out_arg(out, "out")?;
        write_value(
            out,
            Box::into_raw(Box::new(kcsi_attacher {
                host: std::sync::Arc::downgrade(host),
            })),
        );
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
    guard("kcsi_attacher_wait_for_attach", err_out, || {
        let host = upgrade(&attacher_arg(a)?.host)?;
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
    guard("kcsi_attacher_device_mount_path", err_out, || {
        let host = upgrade(&attacher_arg(a)?.host)?;
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
#[no_mangle]
pub extern "C" fn kcsi_attacher_mount_device(
    a: *mut kcsi_attacher,
    spec_json: *const c_char,
    device_mount_path: *const c_char,
    args_json: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard("kcsi_attacher_mount_device", err_out, || {
        let host = upgrade(&attacher_arg(a)?.host)?;
        let spec: VolumeSpec = json_arg(spec_json, "spec_json")?;
        let path = str_arg(device_mount_path, "device_mount_path")?;
        let args: MountDeviceArgs = match opt_str_arg(args_json, "args_json")? {
            None => MountDeviceArgs::default(),
            Some(_) => json_arg(args_json, "args_json")?,
        };
        runtime::block_on(attacher::mount_device(&host, &spec, path, &args))?
    })
}

/// UnmountDevice: NodeUnstageVolume (when the driver has STAGE_UNSTAGE_VOLUME) with what the
/// `vol_data.json` next to `device_mount_path` recorded, then removes the global mount dir.
/// Succeeds without doing anything when that file is missing; a corrupt file is an error.
#[no_mangle]
pub extern "C" fn kcsi_attacher_unmount_device(
    a: *mut kcsi_attacher,
    device_mount_path: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard("kcsi_attacher_unmount_device", err_out, || {
        let host = upgrade(&attacher_arg(a)?.host)?;
        let path = str_arg(device_mount_path, "device_mount_path")?;
        runtime::block_on(attacher::unmount_device(&host, path))?
    })
}

/// Frees an attacher. Calling with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_attacher_free(a: *mut kcsi_attacher) {
    guard_value((), || {
        if !a.is_null() {
            drop(unsafe { Box::from_raw(a) });
        }
    })
}
