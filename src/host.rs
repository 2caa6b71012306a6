//! One node agent's instance of the plugin: its configuration and everything it owns (driver
//! store, Kubernetes access). Hosts never share state; only the runtime is process-wide.

use std::sync::Mutex;

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
