//! The kubelet plugin watcher's CSI handler: validate, register and deregister drivers with
//! upstream's rules and messages.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::MAX_TIMEOUT;
use crate::csi::csi_client::{CsiClient, NodeInfo};
use crate::csi::driver_store::Driver;
use crate::csi::version::{highest_supported_version, quote_versions, Version, VersionError};
use crate::disk::paths::check_driver_name;
use crate::error::{Error, ErrorClass, ErrorKind, Result};
use crate::goquote::quote;
use crate::host::Host;

/// The version half of `validateVersions`: the highest usable version, or upstream's error.
fn highest_version(caller: &str, name: &str, versions: &[String]) -> Result<Version> {
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
fn check_existing(
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

fn check_inputs(name: &str, endpoint: &str) -> Result<()> {
    check_driver_name(name)?;
    crate::csi::csi_client::socket_path(endpoint)?;
    Ok(())
}

/// `ValidatePlugin`: no side effects.
pub fn validate(host: &Host, name: &str, endpoint: &str, versions: &[String]) -> Result<()> {
    tracing::info!(
        "{}",
        csi_log!(
        "Trying to validate a new CSI Driver with name: {name} endpoint: {endpoint} versions: {}",
        versions.join(","))
    );
    check_inputs(name, endpoint)?;
    highest_version("ValidatePlugin", name, versions)
        .and_then(|v| {
            check_existing(
                "ValidatePlugin",
                name,
                host.drivers.get(name).as_deref(),
                &v,
            )
        })
        .map_err(|e| {
            e.context(format!(
                "validation failed for CSI Driver {name} at endpoint {endpoint}"
            ))
        })
}

/// `RegisterPlugin`: store the driver, ask it for its node info, publish that to the node's
/// API objects; any failure rolls this registration back. Counted in the host's metrics.
pub async fn register(
    host: &Host,
    name: &str,
    endpoint: &str,
    versions: &[String],
    timeout: Option<Duration>,
) -> Result<NodeInfo> {
    register_generation(host, name, endpoint, versions, timeout)
        .await
        .map(|(info, _)| info)
}

/// [`register`], also returning the registration's generation, so that its owner (the plugin
/// watcher) can later remove exactly this registration and never a newer one.
pub async fn register_generation(
    host: &Host,
    name: &str,
    endpoint: &str,
    versions: &[String],
    timeout: Option<Duration>,
) -> Result<(NodeInfo, u64)> {
    let result = register_once(host, name, endpoint, versions, timeout).await;
    host.telemetry.registration(result.is_ok());
    result
}

async fn register_once(
    host: &Host,
    name: &str,
    endpoint: &str,
    versions: &[String],
    timeout: Option<Duration>,
) -> Result<(NodeInfo, u64)> {
    tracing::info!(
        "{}",
        csi_log!("Register new plugin with name: {name} at endpoint: {endpoint}")
    );
    check_inputs(name, endpoint)?;
    let deadline = Instant::now() + timeout.unwrap_or(host.config.timeout).min(MAX_TIMEOUT);
    let version = highest_version("RegisterPlugin", name, versions)?;
    let driver = host.drivers.insert_if(
        name,
        |existing| check_existing("RegisterPlugin", name, existing, &version),
        |generation| {
            Ok(Driver {
                name: name.to_string(),
                endpoint: endpoint.to_string(),
                version: version.clone(),
                client: CsiClient::new(
                    name,
                    endpoint,
                    host.telemetry.clone(),
                    host.config.idle_connection,
                )?,
                node_info: None,
                generation,
            })
        },
    )?;
    let _pending = Pending {
        host,
        name,
        generation: driver.generation,
    };
    match install(host, &driver, deadline).await {
        Ok(info) => {
            if host.drivers.complete(name, driver.generation, info.clone()) {
                host.driver_changed(name);
                tracing::info!(
                    "{}",
                    csi_log!("registered CSI driver {name} (node id {:?})", info.node_id)
                );
                Ok((info, driver.generation))
            } else {
                Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    csi_log!("CSI driver {} was deregistered or replaced while its registration was in progress", quote(name)),
                ))
            }
        }
        Err(err) => {
            if host.drivers.remove_generation(name, driver.generation) {
                host.driver_changed(name);
                if let Err(e) = host.uninstall_node_info(name).await {
                    tracing::error!("{}", csi_log!("registrationHandler.RegisterPlugin failed to unregister plugin due to previous error: {e}"));
                }
            }
            Err(classify_registration_failure(err))
        }
    }
}

/// Drops a registration that never finished, should its future unwind (a panic in a
/// dependency): a half-registered entry would block every later registration of the name.
struct Pending<'a> {
    host: &'a Host,
    name: &'a str,
    generation: u64,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.host.drivers.remove_pending(self.name, self.generation);
    }
}

async fn install(host: &Host, driver: &Driver, deadline: Instant) -> Result<NodeInfo> {
    let info = driver.client.node_get_info(deadline).await?;
    if info.node_id.is_empty() {
        return Err(Error::new(
            ErrorKind::Driver,
            "error adding CSI driver node info: driverNodeID must not be empty",
        ));
    }
    host.install_node_info(&driver.name, &info).await?;
    Ok(info)
}

/// A registration that could not reach the driver or the API server changed nothing (it was
/// rolled back): retrying later may work.
fn classify_registration_failure(err: Error) -> Error {
    match err.kind() {
        ErrorKind::Unavailable | ErrorKind::Timeout => err.with_class(ErrorClass::Transient),
        _ => err,
    }
}

/// `DeRegisterPlugin`. Node info in the API is cleaned up even for a name this host does not
/// know (it may be left from before a restart); the result says whether the name was known.
pub async fn deregister(host: &Host, name: &str) -> Result<()> {
    tracing::info!(
        "{}",
        csi_log!("registrationHandler.DeRegisterPlugin request for plugin {name}")
    );
    check_driver_name(name)?;
    let removed = host.drivers.remove(name);
    host.driver_changed(name);
    host.uninstall_node_info(name).await.map_err(|e| {
        tracing::error!(
            "{}",
            csi_log!("registrationHandler.DeRegisterPlugin failed: {e}")
        );
        e
    })?;
    match removed {
        Some(_) => Ok(()),
        None => Err(Error::not_found(format!(
            "CSI driver {} is not registered",
            quote(name)
        ))),
    }
}

/// `DeRegisterPlugin` for the registration `generation` only: when the driver was meanwhile
/// deregistered by hand or replaced by another registration, nothing is removed.
pub async fn deregister_generation(host: &Host, name: &str, generation: u64) -> Result<()> {
    if !host.drivers.remove_generation(name, generation) {
        tracing::info!(
            "{}",
            csi_log!("CSI driver {name} was deregistered or replaced since its registration; nothing to deregister")
        );
        return Ok(());
    }
    tracing::info!(
        "{}",
        csi_log!("registrationHandler.DeRegisterPlugin request for plugin {name}")
    );
    host.uninstall_node_info(name).await.map_err(|e| {
        tracing::error!(
            "{}",
            csi_log!("registrationHandler.DeRegisterPlugin failed: {e}")
        );
        e
    })
}
