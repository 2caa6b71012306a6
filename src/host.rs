//! The context every volume operation takes: one instance of the plugin's configuration,
//! on-disk layout, registered drivers, Kubernetes access, metrics and volume locks. It runs no
//! background work of its own beyond its API watches; a node's workers (plugin watcher,
//! allocatable updater) live in the node agent above it (`crate::node`). Hosts never share
//! state; only the runtime is process-wide.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::TokenRequestStatus;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::VolumeAttachment;

use serde_json::json;

use crate::config::HostConfig;
use crate::csi::driver_store::{Driver, DriverStore};
use crate::disk::blanks::Blanks;
use crate::disk::paths::Layout;
use crate::disk::volume_data;
use crate::disk::volume_lock::VolumeLocks;
use crate::error::{Error, ErrorKind, Result};
use crate::kube::{objects, Kube};
use crate::telemetry::Telemetry;

pub struct Host {
    pub config: HostConfig,
    pub layout: Layout,
    pub drivers: Arc<DriverStore>,
    /// The API server side; `None` when standalone. Dropping it stops its background tasks.
    pub kube: Option<Kube>,
    /// One lock per volume on disk: operations on the same volume never interleave.
    pub volume_locks: VolumeLocks,
    /// Temp files for `vol_data.json` made ahead (a controller host writes none).
    pub blanks: Blanks,
    /// This host's metrics, recorded by its CSI clients and its API client.
    pub telemetry: Telemetry,
    /// The CSIDriver generation of a host without an API server: its config's objects never
    /// change, so it stays 0 (see `csidriver_generation`).
    pub(crate) config_generation: AtomicU64,
}

impl Host {
    /// Creates a host. Must run inside the runtime (clients spawn tasks).
    pub fn new(config: HostConfig) -> Result<Host> {
        let telemetry = Telemetry::new();
        let kube = match &config.kubeconfig {
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
        // What writers killed mid-write left (vol_data.json temp files) goes now.
        if let Err(e) = volume_data::sweep_temp_dir(&config.root_dir) {
            tracing::warn!("{}", csi_log!("{e}"));
        }
        let blanks = if config.is_controller() {
            Blanks::none()
        } else {
            Blanks::new(&config.root_dir)
        };
        Ok(Host {
            layout: Layout::new(config.root_dir.clone()),
            config,
            drivers: Arc::new(DriverStore::default()),
            kube,
            volume_locks: VolumeLocks::default(),
            blanks,
            telemetry,
            config_generation: AtomicU64::new(0),
        })
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
    fn kube(&self, what: &str) -> Result<&Kube> {
        self.kube.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::NotSupported,
                format!("{what}: this host runs standalone (no \"kubeconfig\"), so there is no API server to ask"),
            )
        })
    }

    /// GET a VolumeAttachment by name, straight from the API server (not a cache).
    pub async fn volume_attachment(&self, name: &str) -> Result<VolumeAttachment> {
        let kube = self.kube(&format!("cannot read VolumeAttachment {name}"))?;
        objects::volume_attachment(&kube.api, self.config.timeout, name).await
    }

    /// A Secret's `data`, values as strings.
    pub async fn secret_data(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<BTreeMap<String, String>> {
        let kube = self.kube(&format!("cannot read Secret {namespace}/{name}"))?;
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
        let kube = self.kube(&format!(
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
    pub fn status(&self) -> serde_json::Value {
        let (initialized, last_error) = self
            .kube
            .as_ref()
            .map_or((false, None), |k| k.startup.snapshot());
        json!({
            "role": if self.config.is_controller() { "controller" } else { "node" },
            "nodeName": self.config.node_name,
            "standalone": self.kube.is_none(),
            "csiNodeInitialized": initialized,
            "lastError": last_error,
            "csiDriversSynced": self.kube.as_ref().map(|k| k.csidrivers.is_synced()),
            "volumeAttachmentsSynced": self.kube.as_ref().and_then(|k| k.volume_attachments.as_ref()).map(|v| v.is_synced()),
            "apiRequests": self.kube.as_ref().map(|k| k.api.requests_sent()),
            "drivers": self.drivers_json(),
            // A node agent fills this in (`NodeAgent::status`).
            "pluginWatcher": null,
        })
    }

    /// `kcsi_list_drivers`' JSON array.
    pub fn drivers_json(&self) -> serde_json::Value {
        let drivers: Vec<serde_json::Value> = self
            .drivers
            .list()
            .iter()
            .map(|d| {
                let info = d.node_info.as_ref();
                json!({
                    "name": d.name,
                    "endpoint": d.endpoint,
                    "highestSupportedVersion": d.version.to_string(),
                    "nodeId": info.map(|i| i.node_id.clone()),
                    "maxVolumesPerNode": info.map(|i| i.max_volumes_per_node),
                    "topology": info.and_then(|i| i.topology.clone()),
                })
            })
            .collect();
        serde_json::Value::Array(drivers)
    }
}
