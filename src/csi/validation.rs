//! The CSI half of the kubelet's registration handler (upstream `csi_plugin.go`
//! `RegistrationHandler.validateVersions`): which driver names, endpoints and versions a
//! registration may carry, with upstream's messages. No side effects; the node agent
//! (`crate::node::registration`) stores, installs and removes drivers with these rules.

use crate::csi::driver_store::{Driver, DriverStore};
use crate::csi::version::{highest_supported_version, quote_versions, Version, VersionError};
use crate::error::{Error, ErrorKind, Result};
use crate::goquote::quote;
use crate::names::check_driver_name;

/// The version half of `validateVersions`: the highest usable version, or upstream's error.
pub fn highest_version(caller: &str, name: &str, versions: &[String]) -> Result<Version> {
    highest_supported_version(versions).map_err(|e| match e {
        VersionError::Empty => Error::new(
            ErrorKind::UnsupportedVersion,
            csi_log!(
                "{caller} for CSI driver {} failed. Plugin returned an empty list for supported versions",
                quote(name)
            ),
        ),
        VersionError::Unsupported(why) => Error::new(
            ErrorKind::UnsupportedVersion,
            csi_log!(
                "{caller} for CSI driver {} failed. None of the versions specified {} are supported. err={why}",
                quote(name),
                quote_versions(versions)
            ),
        ),
    })
}

/// The other half: a registered driver of that name must have a strictly lower version.
pub fn check_existing(
    caller: &str,
    name: &str,
    existing: Option<&Driver>,
    new: &Version,
) -> Result<()> {
    match existing {
        Some(existing) if existing.version >= *new => Err(Error::new(
            ErrorKind::AlreadyExists,
            csi_log!(
                "{caller} for CSI driver {} failed. Another driver with the same name is already registered with a higher supported version: {}",
                quote(name),
                quote(&existing.version.to_string())
            ),
        )),
        _ => Ok(()),
    }
}

/// A driver name the kubelet accepts and an endpoint that names a socket.
pub fn check_inputs(name: &str, endpoint: &str) -> Result<()> {
    check_driver_name(name)?;
    crate::csi::csi_client::socket_path(endpoint)?;
    Ok(())
}

/// `ValidatePlugin` against the drivers registered in `drivers`: no side effects.
pub fn validate(
    drivers: &DriverStore,
    name: &str,
    endpoint: &str,
    versions: &[String],
) -> Result<()> {
    tracing::info!(
        "{}",
        csi_log!(
        "Trying to validate a new CSI Driver with name: {name} endpoint: {endpoint} versions: {}",
        versions.join(","))
    );
    check_inputs(name, endpoint)?;
    highest_version("ValidatePlugin", name, versions)
        .and_then(|v| check_existing("ValidatePlugin", name, drivers.get(name).as_deref(), &v))
        .map_err(|e| {
            e.context(format!(
                "validation failed for CSI Driver {name} at endpoint {endpoint}"
            ))
        })
}
