//! One node agent's instance of the plugin: its configuration and everything it owns (driver
//! store, Kubernetes access). Hosts never share state; only the runtime is process-wide.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::authentication::v1::TokenRequestStatus;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::VolumeAttachment;

use serde_json::json;

use crate::config::HostConfig;
use crate::csi_client::NodeInfo;
use crate::driver_facts::DriverFacts;
use crate::driver_store::DriverStore;
use crate::error::{Error, ErrorKind, Result};
use crate::paths::Layout;

pub struct Host {
    pub config: HostConfig,
    pub layout: Layout,
    pub drivers: DriverStore,
    /// Upstream's `SetKubeletError`: why the node is not ready yet, if anything.
    last_error: Mutex<Option<String>>,
}

impl Host {
    /// Creates a host. Must run inside the runtime (clients spawn tasks).
    pub fn new(config: HostConfig) -> Result<Host> {
        if let Some(kubeconfig) = &config.kubeconfig {
            return Err(Error::new(
                ErrorKind::NotSupported,
                format!(
                    "kubeconfig {} given, but this kcsi build cannot keep Node and CSINode objects yet; \
                     leave \"kubeconfig\" out to run standalone",
                    kubeconfig.display()
                ),
            ));
        }
        tracing::warn!("kubernetes.io/csi: kubeclient not set, assuming standalone kubelet");
        Ok(Host {
            layout: Layout::new(config.root_dir.clone()),
            config,
            drivers: DriverStore::default(),
            last_error: Mutex::new(None),
        })
    }

    /// The CSIDriver facts for `driver`; standalone hosts read them from their config.
    pub fn driver_facts(&self, driver: &str) -> Result<DriverFacts> {
        let object = self.config.csi_drivers.iter().find(|d| d.metadata.name.as_deref() == Some(driver));
        DriverFacts::new(driver, object)
    }

    /// The registered driver `name`, or upstream's transient "not found" error (a driver that
    /// is not registered yet, e.g. right after a kubelet restart, may register soon).
    pub fn driver(&self, name: &str) -> Result<std::sync::Arc<crate::driver_store::Driver>> {
        if name.is_empty() {
            return Err(Error::not_found("driver name is empty").transient());
        }
        self.drivers.get(name).ok_or_else(|| {
            Error::not_found(format!("driver name {name} not found in the list of registered CSI drivers")).transient()
        })
    }

    fn no_api(&self, what: &str) -> Error {
        Error::new(
            ErrorKind::NotSupported,
            format!("{what}: this host runs standalone (no \"kubeconfig\"), so there is no API server to ask"),
        )
    }

    /// GET a VolumeAttachment by name, straight from the API server (not a cache).
    pub async fn volume_attachment(&self, name: &str) -> Result<VolumeAttachment> {
        Err(self.no_api(&format!("cannot read VolumeAttachment {name}")))
    }

    /// A Secret's `data`, values as strings.
    pub async fn secret_data(&self, namespace: &str, name: &str) -> Result<BTreeMap<String, String>> {
        Err(self.no_api(&format!("cannot read Secret {namespace}/{name}")))
    }

    /// A service-account token for `pod` (TokenRequest bound to the pod).
    pub async fn service_account_token(
        &self,
        pod: &Pod,
        audiences: Vec<String>,
        expiration_seconds: i64,
    ) -> Result<TokenRequestStatus> {
        let _ = (audiences, expiration_seconds);
        let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        Err(self.no_api(&format!("cannot request a token for service account {ns}/{sa}")))
    }

    /// Publishes a registered driver's node info to the Node and CSINode objects.
    pub async fn install_node_info(&self, _driver: &str, _info: &NodeInfo) -> Result<()> {
        Ok(())
    }

    /// Removes a driver's node info from the Node and CSINode objects.
    pub async fn uninstall_node_info(&self, _driver: &str) -> Result<()> {
        Ok(())
    }

    pub fn status(&self) -> serde_json::Value {
        let last_error = self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
        json!({
            "nodeName": self.config.node_name,
            "standalone": self.config.kubeconfig.is_none(),
            "csiNodeInitialized": false,
            "lastError": last_error,
            "drivers": self.drivers_json(),
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
