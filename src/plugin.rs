//! Plugin queries that need no driver connection (upstream `csiPlugin` methods): volume name,
//! support, attachability, device mountability, remount.

use crate::error::Result;
use crate::host::Host;
use crate::spec::{LifecycleMode, VolumeSpec};

const PREFIX: &str = "kubernetes.io/csi: ";

/// `GetVolumeName`: `driver^handle`, persistent volumes only.
pub fn volume_name(spec: &VolumeSpec) -> Result<String> {
    let src = spec.persistent_source().map_err(|e| {
        e.context(format!("{PREFIX}plugin.GetVolumeName failed to extract volume source from spec"))
    })?;
    Ok(format!("{}^{}", src.driver, src.volume_handle))
}

/// `CanSupport`.
pub fn can_support(spec: &VolumeSpec) -> bool {
    spec.has_csi_source()
}

/// `CanAttach`: inline volumes never; PVs unless the CSIDriver says `attachRequired: false`.
pub fn can_attach(host: &Host, spec: &VolumeSpec) -> Result<bool> {
    if spec.lifecycle_mode()? == LifecycleMode::Ephemeral {
        return Ok(false);
    }
    let src = spec.persistent_source()?;
    Ok(host.driver_facts(&src.driver)?.attach_required)
}

/// `CanDeviceMount`: every PV (even without STAGE_UNSTAGE, MountDevice then only records
/// metadata); inline volumes never.
pub fn can_device_mount(spec: &VolumeSpec) -> Result<bool> {
    if spec.lifecycle_mode()? == LifecycleMode::Ephemeral {
        return Ok(false);
    }
    spec.persistent_source()?;
    Ok(true)
}

/// `RequiresRemount`: the CSIDriver's `requiresRepublish`; false whenever it cannot be found.
pub fn requires_remount(host: &Host, spec: &VolumeSpec) -> bool {
    let Ok(driver) = spec.driver_name() else { return false };
    host.driver_facts(driver).map(|f| f.requires_republish).unwrap_or(false)
}
