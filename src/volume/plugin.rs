//! Plugin queries that need no driver connection (upstream `csiPlugin` methods): volume name,
//! support, attachability, device mountability, remount, SELinux context mounts.

use crate::error::{Error, Result};
use crate::goquote::quote;
use crate::host::Host;
use crate::spec::{SourceHead, SpecHead};
use crate::volume::driver_facts::{attach_required, requires_republish};

/// GetVolumeName's separator: `driver^handle`.
const VOLUME_NAME_SEP: char = '^';

/// The name the kubelet keys a persistent volume by (GetVolumeName's output): `driver^handle`.
pub fn unique_volume_name(driver: &str, volume_handle: &str) -> String {
    format!("{driver}{VOLUME_NAME_SEP}{volume_handle}")
}

/// `volume_name` (`driver^handle`, GetVolumeName's output) split in two.
pub fn split_volume_name(volume_name: &str) -> Result<(&str, &str)> {
    if volume_name.is_empty() {
        return Err(Error::invalid("volume_name is empty"));
    }
    let mut parts = volume_name.split(VOLUME_NAME_SEP);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(driver), Some(handle), None) => Ok((driver, handle)),
        _ => Err(Error::invalid(format!(
            "volume_name {} is not <driver>^<volume handle> (GetVolumeName's output)",
            quote(volume_name)
        ))),
    }
}

/// `GetVolumeName`: `driver^handle`, persistent volumes only.
pub fn volume_name(spec: &SpecHead) -> Result<String> {
    let what = || csi_log!("plugin.GetVolumeName failed to extract volume source from spec");
    match spec.source().map_err(|e| e.context(what()))? {
        SourceHead::Persistent {
            driver,
            volume_handle,
        } => Ok(unique_volume_name(driver, volume_handle)),
        SourceHead::Inline { .. } => Err(Error::invalid(
            "unexpected api.CSIVolumeSource found in volume.Spec",
        )
        .context(what())),
    }
}

/// `CanSupport`.
pub fn can_support(spec: &SpecHead) -> bool {
    spec.has_csi_source()
}

/// `CanAttach`: inline volumes never; PVs unless the CSIDriver says `attachRequired: false`.
pub fn can_attach(host: &Host, spec: &SpecHead) -> Result<bool> {
    match spec.source()? {
        SourceHead::Inline { .. } => Ok(false),
        SourceHead::Persistent { driver, .. } => driver_attach_required(host, driver),
    }
}

/// Whether `driver`'s PersistentVolumes need attaching (`CanAttach` without the spec).
pub fn driver_attach_required(host: &Host, driver: &str) -> Result<bool> {
    if driver.is_empty() {
        return Err(Error::invalid("the driver name is empty"));
    }
    host.with_csidriver(driver, attach_required)
}

/// `CanDeviceMount`: every PV (even without STAGE_UNSTAGE, MountDevice then only records
/// metadata); inline volumes never.
pub fn can_device_mount(spec: &SpecHead) -> Result<bool> {
    Ok(matches!(spec.source()?, SourceHead::Persistent { .. }))
}

/// `RequiresRemount`: the CSIDriver's `requiresRepublish`; false whenever it cannot be found.
pub fn requires_remount(host: &Host, spec: &SpecHead) -> bool {
    let driver = match spec.source() {
        Ok(SourceHead::Inline { driver }) | Ok(SourceHead::Persistent { driver, .. }) => driver,
        Err(_) => return false,
    };
    host.with_csidriver(driver, requires_republish)
        .unwrap_or(false)
}

/// `SupportsSELinuxContextMount`: with the gate `SELinuxMountReadWriteOncePod`, the CSIDriver's
/// `seLinuxMount` (false without a CSIDriver); always false without the gate.
pub fn supports_selinux_context_mount(host: &Host, spec: &SpecHead) -> Result<bool> {
    if !host.config().gate("SELinuxMountReadWriteOncePod") {
        return Ok(false);
    }
    let driver = match spec.source()? {
        SourceHead::Inline { driver } | SourceHead::Persistent { driver, .. } => driver,
    };
    Ok(host.driver_facts(driver)?.se_linux_mount)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn volume_name_must_be_driver_caret_handle() {
        assert_eq!(split_volume_name("d^h").unwrap(), ("d", "h"));
        for bad in ["", "dh", "d^h^x"] {
            let err = split_volume_name(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
            assert!(err.message().contains("volume_name"), "{}", err.message());
        }
    }
}
