//! The kubelet's registration handler for CSI drivers (upstream `csi_plugin.go`
//! `RegistrationHandler`), as the plugin watcher and `kcsi_register_plugin` call it: validate
//! with the CSI rules (`crate::csi::validation`), store the driver, publish its node info
//! to the API server and let the allocatable updater follow.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::MAX_TIMEOUT;
use crate::csi;
use crate::csi::csi_client::{CsiClient, NodeInfo};
use crate::csi::driver_store::Driver;
use crate::csi::validation::{check_existing, check_inputs, highest_version};
use crate::error::{Error, ErrorClass, ErrorKind, Result};
use crate::goquote::quote;
use crate::host::Host;
use crate::names::check_driver_name;
use crate::node::NodeAgent;

/// `ValidatePlugin`: no side effects.
pub fn validate(host: &Host, name: &str, endpoint: &str, versions: &[String]) -> Result<()> {
    csi::validation::validate(host.drivers(), name, endpoint, versions)
}

/// `RegisterPlugin`: store the driver, ask it for its node info, publish that to the node's
/// API objects; any failure rolls this registration back. Counted in the host's metrics.
pub async fn register(
    node: &NodeAgent,
    name: &str,
    endpoint: &str,
    versions: &[String],
    timeout: Option<Duration>,
) -> Result<NodeInfo> {
    register_generation(node, name, endpoint, versions, timeout)
        .await
        .map(|(info, _)| info)
}

/// [`register`], also returning the registration's generation, so that its owner (the plugin
/// watcher) can later remove exactly this registration and never a newer one.
pub async fn register_generation(
    node: &NodeAgent,
    name: &str,
    endpoint: &str,
    versions: &[String],
    timeout: Option<Duration>,
) -> Result<(NodeInfo, u64)> {
    let result = register_once(node, name, endpoint, versions, timeout).await;
    node.host.telemetry().registration(result.is_ok());
    result
}

async fn register_once(
    node: &NodeAgent,
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
    let host: &Host = &node.host;
    let deadline = Instant::now() + timeout.unwrap_or(host.config().timeout).min(MAX_TIMEOUT);
    let version = highest_version("RegisterPlugin", name, versions)?;
    let driver = host.drivers().insert_if(
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
                    host.telemetry().clone(),
                    host.config().idle_connection,
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
            if host
                .drivers()
                .complete(name, driver.generation, info.clone())
            {
                node.driver_changed(name);
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
            if host.drivers().remove_generation(name, driver.generation) {
                node.driver_changed(name);
                if let Err(e) = uninstall_node_info(host, name).await {
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
        self.host
            .drivers()
            .remove_pending(self.name, self.generation);
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
    install_node_info(host, &driver.name, &info).await?;
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
pub async fn deregister(node: &NodeAgent, name: &str) -> Result<()> {
    tracing::info!(
        "{}",
        csi_log!("registrationHandler.DeRegisterPlugin request for plugin {name}")
    );
    check_driver_name(name)?;
    let host: &Host = &node.host;
    let removed = host.drivers().remove(name);
    node.driver_changed(name);
    uninstall_node_info(host, name).await.map_err(|e| {
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
pub async fn deregister_generation(node: &NodeAgent, name: &str, generation: u64) -> Result<()> {
    let host: &Host = &node.host;
    if !host.drivers().remove_generation(name, generation) {
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
    uninstall_node_info(host, name).await.map_err(|e| {
        tracing::error!(
            "{}",
            csi_log!("registrationHandler.DeRegisterPlugin failed: {e}")
        );
        e
    })
}

/// Publishes a registered driver's node info to the Node and CSINode objects (nothing to
/// publish when standalone).
async fn install_node_info(host: &Host, driver: &str, info: &NodeInfo) -> Result<()> {
    let Some(kube) = host.kube() else {
        return Ok(());
    };
    kube.node_info
        .install(
            driver,
            &info.node_id,
            info.max_volumes_per_node,
            info.topology.as_ref(),
        )
        .await
}

/// Removes a driver's node info from the Node and CSINode objects.
async fn uninstall_node_info(host: &Host, driver: &str) -> Result<()> {
    let Some(kube) = host.kube() else {
        return Ok(());
    };
    kube.node_info.uninstall(driver).await
}
