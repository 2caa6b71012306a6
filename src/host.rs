//! The context every volume operation takes: one instance of the plugin's configuration,
//! on-disk layout, registered drivers, Kubernetes access, metrics and volume locks. It runs no
//! background work of its own beyond its API watches; a node's workers (plugin watcher,
//! allocatable updater) live in the node agent above it (`crate::node`). Hosts never share
//! state; only the runtime is process-wide.

mod feeds;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::TokenRequestStatus;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};

use serde::Serialize;

use crate::config::HostConfig;
use crate::csi::driver_store::{Driver, DriverStore};
use crate::disk::files::Files;
use crate::disk::paths::Layout;
use crate::disk::volume_lock::VolumeLocks;
use crate::error::{Error, ErrorKind, Result};
use crate::kube::{objects, Kube};
use crate::telemetry::Telemetry;

/// What `kcsi_host_status` reports of a host.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    pub role: &'static str,
    pub node_name: String,
    pub standalone: bool,
    pub csi_node_initialized: bool,
    pub last_error: Option<String>,
    pub csi_drivers_synced: Option<bool>,
    pub volume_attachments_synced: Option<bool>,
    pub api_requests: Option<u64>,
    pub drivers: Vec<DriverStatus>,
}

/// One registered driver, as `kcsi_list_drivers` reports it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverStatus {
    pub name: String,
    pub endpoint: String,
    pub highest_supported_version: String,
    pub node_id: Option<String>,
    pub max_volumes_per_node: Option<i64>,
    pub topology: Option<BTreeMap<String, String>>,
}

pub struct Host {
    config: HostConfig,
    drivers: Arc<DriverStore>,
    /// The API server side; `None` when standalone. Dropping it stops its background tasks.
    kube: Option<Kube>,
    /// One lock per volume on disk: operations on the same volume never interleave.
    volume_locks: VolumeLocks,
    /// The files kcsi writes below the root (a controller host has no blank pool: it writes
    /// none).
    files: Files,
    /// This host's metrics, recorded by its CSI clients and its API client.
    telemetry: Telemetry,
    /// The CSIDriver generation of a host without an API server: its config's objects never
    /// change, so it stays 0 (see `csidriver_generation`).
    config_generation: AtomicU64,
}

impl Host {
    /// Creates a host. Must run inside the runtime (clients spawn tasks). The config is
    /// checked here, so a Rust caller that builds one by hand gets the C API's checks too.
    pub fn new(config: HostConfig) -> Result<Host> {
        let config = config.check()?;
        let telemetry = Telemetry::new();
        let kube = match config.api_source() {
            Some(kubeconfig) => Some(Kube::start(&config, kubeconfig, &telemetry)?),
            None => {
                // Expected for a standalone host, so a notice, not a warning.
                tracing::info!(
                    node = %config.node_name,
                    "{}",
                    csi_log!("kubeclient not set, assuming standalone kubelet")
                );
                None
            }
        };
        let files = if config.is_controller() {
            Files::without_blanks(&config.root_dir)
        } else {
            Files::new(&config.root_dir)
        };
        // What writers killed mid-write left (vol_data.json temp files) goes now.
        if let Err(e) = files.sweep_temp_dir() {
            tracing::warn!("{}", csi_log!("{e}"));
        }
        Ok(Host {
            config,
            drivers: Arc::new(DriverStore::default()),
            kube,
            volume_locks: VolumeLocks::default(),
            files,
            telemetry,
            config_generation: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// The kubelet's on-disk layout below the root.
    pub fn layout(&self) -> &Layout {
        self.files.layout()
    }

    /// The files kcsi writes below the root.
    pub fn files(&self) -> &Files {
        &self.files
    }

    /// The registered drivers.
    pub fn drivers(&self) -> &Arc<DriverStore> {
        &self.drivers
    }

    pub fn volume_locks(&self) -> &VolumeLocks {
        &self.volume_locks
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// The API server side: the one way to the API client; `None` when standalone.
    pub fn kube(&self) -> Option<&Kube> {
        self.kube.as_ref()
    }

    /// Refuses a node-only `call` on a controller host (it has no node, no volumes on disk
    /// and no registered drivers).
    pub fn node_only(&self, call: &str) -> Result<()> {
        if self.config.is_controller() {
            return Err(Error::new(
                ErrorKind::NotSupported,
                format!("{call} is a node call, and this host has \"role\": \"controller\" (the attach/detach half)"),
            ));
        }
        Ok(())
    }

    /// `kcsi_host_metrics`' text: every family in the Prometheus text format 0.0.4.
    pub fn metrics_text(&self) -> Result<String> {
        self.telemetry
            .set_registered_drivers(self.drivers.list().len());
        self.telemetry.encode()
    }

    /// The registered driver `name`, or upstream's transient "not found" error (a driver that
    /// is not registered yet, e.g. right after a kubelet restart, may register soon).
    pub fn driver(&self, name: &str) -> Result<Arc<Driver>> {
        if name.is_empty() {
            return Err(Error::not_found("driver name is empty").transient());
        }
        self.drivers.get(name).ok_or_else(|| {
            Error::not_found(format!(
                "driver name {name} not found in the list of registered CSI drivers"
            ))
            .transient()
        })
    }

    /// The API server side, or the standalone host's refusal to do `what`.
    fn api_server(&self, what: &str) -> Result<&Kube> {
        self.kube().ok_or_else(|| {
            Error::new(
                ErrorKind::NotSupported,
                format!("{what}: this host runs standalone (no \"kubeconfig\"), so there is no API server to ask"),
            )
        })
    }

    /// GET a VolumeAttachment by name, straight from the API server (not a cache).
    pub async fn volume_attachment(&self, name: &str) -> Result<VolumeAttachment> {
        let kube = self.api_server(&format!("cannot read VolumeAttachment {name}"))?;
        objects::volume_attachment(&kube.api, self.config.timeout, name).await
    }

    /// A Secret's `data`, values as strings.
    pub async fn secret_data(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<BTreeMap<String, String>> {
        let kube = self.api_server(&format!("cannot read Secret {namespace}/{name}"))?;
        objects::secret_data(&kube.api, self.config.timeout, namespace, name).await
    }

    /// A service-account token for `pod` (TokenRequest bound to the pod), from the host's
    /// token cache while it needs no refresh.
    pub async fn service_account_token(
        &self,
        pod: &Pod,
        audiences: Vec<String>,
        expiration_seconds: i64,
    ) -> Result<TokenRequestStatus> {
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let kube = self.api_server(&format!(
            "cannot request a token for service account {ns}/{sa}"
        ))?;
        kube.tokens
            .get(
                &kube.api,
                self.config.timeout,
                pod,
                audiences,
                expiration_seconds,
            )
            .await
    }

    /// `csiNodeInitialized`/`lastError` follow the CSINode start-up (upstream's
    /// `SetKubeletError`); a standalone host has no CSINode to initialise.
    pub fn status(&self) -> HostStatus {
        let (csi_node_initialized, last_error) =
            self.kube().map_or((false, None), |k| k.startup.snapshot());
        HostStatus {
            role: if self.config.is_controller() {
                "controller"
            } else {
                "node"
            },
            node_name: self.config.node_name.clone(),
            standalone: self.kube.is_none(),
            csi_node_initialized,
            last_error,
            csi_drivers_synced: self.kube().map(|k| k.csidrivers.is_synced()),
            volume_attachments_synced: self
                .kube()
                .and_then(|k| k.volume_attachments.as_ref())
                .map(|v| v.is_synced()),
            api_requests: self.kube().map(|k| k.api.requests_sent()),
            drivers: self.drivers_status(),
        }
    }

    /// The registered drivers, as `kcsi_list_drivers` reports them.
    pub fn drivers_status(&self) -> Vec<DriverStatus> {
        self.drivers
            .list()
            .iter()
            .map(|d| {
                let info = d.node_info.as_ref();
                DriverStatus {
                    name: d.name.clone(),
                    endpoint: d.endpoint.clone(),
                    highest_supported_version: d.version.to_string(),
                    node_id: info.map(|i| i.node_id.clone()),
                    max_volumes_per_node: info.map(|i| i.max_volumes_per_node),
                    topology: info.and_then(|i| i.topology.clone()),
                }
            })
            .collect()
    }

    /// Grows (release order) after every change to the CSIDriver objects the facts come from;
    /// never, for a host config's objects. An answer cached with the value read before asking
    /// is current while the value has not moved.
    pub fn csidriver_generation(&self) -> &AtomicU64 {
        match self.kube() {
            Some(kube) => kube.csidrivers.generation(),
            None => &self.config_generation,
        }
    }

    /// `read` of the CSIDriver object of `driver` (or `None`), without building all its facts:
    /// the kubelet's reconciler asks CanAttach and RequiresRemount of every volume every 100 ms.
    pub fn with_csidriver<T>(
        &self,
        driver: &str,
        read: impl FnOnce(Option<&CSIDriver>) -> T,
    ) -> Result<T> {
        if let Some(kube) = self.kube() {
            return Ok(read(kube.csidrivers.get(driver)?.as_deref()));
        }
        Ok(read(
            self.config
                .csi_drivers
                .iter()
                .find(|d| d.metadata.name.as_deref() == Some(driver)),
        ))
    }
}
