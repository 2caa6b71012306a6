//! Plugin query exports. `spec_json` is `{"persistentVolume": <PV>, "readOnly": bool},
//! `{"volume": <Volume>}` or the plain `{"csi": {..}}` form (see `kcsi_mounter_new`).

use std::ffi::c_char;
use std::sync::Arc;

use serde::Deserialize;

use super::boundary::{guard, json_arg, out_arg, str_arg, write_string, write_value};
use super::error::kcsi_error;
use super::handle::handle_arg;
use super::host::kcsi_host;
use super::kcsi_result;
use crate::error::Result;
use crate::host::Host;
use crate::spec::SpecHead;
use crate::volume::plugin;

/// The unique volume name `<driver>^<volumeHandle>` of a PersistentVolume spec (inline volumes
/// have none: `KCSI_ERR_INVALID_ARGUMENT`). Caller frees `*name_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_get_volume_name(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    name_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        handle_arg(h)?;
        let spec: SpecHead = json_arg(spec_json, "spec_json")?;
        out_arg(name_out, "name_out")?;
        write_string(name_out, &plugin::volume_name(&spec)?);
        Ok(())
    })
}

/// The one body of the boolean queries: the handle's target (the host, or its node agent), the
/// spec as `S`, and `*out` set to the query's answer (written only on success).
pub(crate) fn bool_query<'a, T, S: Deserialize<'a>>(
    target: Result<T>,
    spec_json: *const c_char,
    out: *mut bool,
    query: impl FnOnce(&T, &S) -> Result<bool>,
) -> Result<()> {
    let target = target?;
    let spec: S = json_arg(spec_json, "spec_json")?;
    out_arg(out, "out")?;
    write_value(out, query(&target, &spec)?);
    Ok(())
}

/// Whether the spec has a CSI source (PV or inline).
#[no_mangle]
pub extern "C" fn kcsi_can_support(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    out: *mut bool,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || bool_query(
        handle_arg(h),
        spec_json,
        out,
        |_, spec| { Ok(plugin::can_support(spec)) }
    ))
}

/// Whether the volume needs attaching: false for inline volumes and for drivers whose
/// CSIDriver says `attachRequired: false`; true when no CSIDriver exists.
#[no_mangle]
pub extern "C" fn kcsi_can_attach(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    out: *mut bool,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || bool_query(
        handle_arg(h),
        spec_json,
        out,
        |host: &Arc<Host>, spec| { plugin::can_attach(host, spec) }
    ))
}

/// `kcsi_can_attach` for a PersistentVolume of `driver_name`, without a spec to encode and
/// parse: whether the driver's CSIDriver says `attachRequired` (true when none exists). For a
/// caller that asks it of every volume in a loop, as the kubelet's reconciler does every 100 ms.
#[no_mangle]
pub extern "C" fn kcsi_driver_attach_required(
    h: *mut kcsi_host,
    driver_name: *const c_char,
    out: *mut bool,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        let driver = str_arg(driver_name, "driver_name")?;
        out_arg(out, "out")?;
        write_value(out, plugin::driver_attach_required(&host, driver)?);
        Ok(())
    })
}

/// A counter kcsi increments after every change to the CSIDriver objects its driver facts
/// (`kcsi_driver_attach_required`, `kcsi_can_attach`, `kcsi_requires_remount`, ...) come
/// from: the API server's, watched or fed by the program (`kcsi_host_csidriver_apply`), or
/// the host config's, which never change. `*out` points
/// to it until `kcsi_host_free`; read it with an atomic 64-bit load (acquire). kcsi moves it
/// once its answers reflect a change, so an answer cached together with the value read before
/// asking is replaced as soon as the value moves: a caller that asks the same query of every
/// volume in a loop may answer from its cache.
#[no_mangle]
pub extern "C" fn kcsi_host_csidriver_generation(
    h: *mut kcsi_host,
    out: *mut *const u64,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        out_arg(out, "out")?;
        write_value(out, host.csidriver_generation().as_ptr().cast_const());
        Ok(())
    })
}

/// On a host made with `"csiDriversFromHost": true`: a CSIDriver object (JSON, as the API
/// server serves it) that the program's own informer added or updated. kcsi then sends no
/// CSIDriver list or watch of its own; its driver facts and `kcsi_host_csidriver_generation`
/// follow what the program feeds. `KCSI_ERR_FAILED_PRECONDITION` on other hosts.
#[no_mangle]
pub extern "C" fn kcsi_host_csidriver_apply(
    h: *mut kcsi_host,
    csidriver_json: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        host.apply_csidriver(json_arg(csidriver_json, "csidriver_json")?)
    })
}

/// On a `"csiDriversFromHost"` host: the CSIDriver `name` was deleted. `KCSI_ERR_NOT_FOUND`
/// when kcsi had no such object (nothing changes).
#[no_mangle]
pub extern "C" fn kcsi_host_csidriver_delete(
    h: *mut kcsi_host,
    name: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        host.delete_csidriver(str_arg(name, "name")?)
    })
}

/// On a `"csiDriversFromHost"` host: the program's informer has synced, every CSIDriver it
/// listed has been applied. Until then a driver-facts lookup on a caller's thread waits up to
/// 5 s for it and then fails with a transient `KCSI_ERR_UNAVAILABLE`, as before kcsi's own
/// first list.
#[no_mangle]
pub extern "C" fn kcsi_host_csidrivers_synced(
    h: *mut kcsi_host,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || handle_arg(h)?.csidrivers_synced())
}

/// On a controller host made with `"volumeAttachmentsFromHost": true`: a VolumeAttachment
/// (JSON, as the API server serves it) that the program's informer (the attach/detach
/// controller's) added or updated. kcsi then sends no VolumeAttachment list or watch of its
/// own: Attach and Detach wait on, and VolumesAreAttached reads, what the program feeds, so
/// the program feeds the attachment an Attach or Detach waits on while the call runs.
/// `KCSI_ERR_FAILED_PRECONDITION` on other hosts.
#[no_mangle]
pub extern "C" fn kcsi_host_volumeattachment_apply(
    h: *mut kcsi_host,
    volumeattachment_json: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        host.apply_volume_attachment(json_arg(volumeattachment_json, "volumeattachment_json")?)
    })
}

/// On a `"volumeAttachmentsFromHost"` host: the VolumeAttachment `name` is gone.
/// `KCSI_ERR_NOT_FOUND` when kcsi had no such object (nothing changes).
#[no_mangle]
pub extern "C" fn kcsi_host_volumeattachment_delete(
    h: *mut kcsi_host,
    name: *const c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        host.delete_volume_attachment(str_arg(name, "name")?)
    })
}

/// On a `"volumeAttachmentsFromHost"` host: the program's informer has synced. Until then
/// kcsi does not trust a VolumeAttachment's absence from what was fed: Attach creates it
/// (AlreadyExists tolerated) and VolumesAreAttached asks the API server.
#[no_mangle]
pub extern "C" fn kcsi_host_volumeattachments_synced(
    h: *mut kcsi_host,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || handle_arg(h)?.volume_attachments_synced())
}

/// Whether the volume is device-mounted (staged): true for PersistentVolumes, false for
/// inline volumes.
#[no_mangle]
pub extern "C" fn kcsi_can_device_mount(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    out: *mut bool,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || bool_query(
        handle_arg(h),
        spec_json,
        out,
        |_, spec| { plugin::can_device_mount(spec) }
    ))
}

/// Whether the volume must be re-published periodically (the CSIDriver's
/// `requiresRepublish`); false when the driver has no CSIDriver object.
#[no_mangle]
pub extern "C" fn kcsi_requires_remount(
    h: *mut kcsi_host,
    spec_json: *const c_char,
    out: *mut bool,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || bool_query(
        handle_arg(h),
        spec_json,
        out,
        |host: &Arc<Host>, spec| { Ok(plugin::requires_remount(host, spec)) }
    ))
}

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
    guard!(err_out, || bool_query(
        handle_arg(h),
        spec_json,
        out,
        |host: &Arc<Host>, spec| { plugin::supports_selinux_context_mount(host, spec) }
    ))
}
