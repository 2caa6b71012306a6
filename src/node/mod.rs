//! The node agent: the background work a kubelet does for its CSI plugin, on top of the
//! [`Host`] context every volume operation takes. Upstream keeps these apart too: the kubelet's
//! plugin manager (`pkg/kubelet/pluginmanager`, here [`plugin_watcher`]) hands each driver
//! socket to the CSI plugin's `RegistrationHandler` ([`registration`]), and the plugin runs the
//! CSINode allocatable updater ([`node_updater`]). A controller host is the same context
//! without this agent.

pub mod node_updater;
pub mod plugin_watcher;
pub mod registration;

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use crate::config::HostConfig;
use crate::error::Result;
use crate::host::Host;

use node_updater::NodeUpdater;
use plugin_watcher::{PluginWatcher, PluginWatcherStatus};

/// A host with its node's workers. Dereferences to its [`Host`], so a node agent goes
/// wherever a volume operation wants the context.
pub struct NodeAgent {
    pub host: Arc<Host>,
    /// Refreshes CSINode `allocatable.count`; with a kubeconfig and the gate on.
    pub node_updater: Option<NodeUpdater>,
    /// Set by [`NodeAgent::start`] when the config asks for `"pluginWatcher"`.
    plugin_watcher: OnceLock<PluginWatcher>,
}

impl Deref for NodeAgent {
    type Target = Host;
    fn deref(&self) -> &Host {
        &self.host
    }
}

impl NodeAgent {
    /// A host for `config` with its allocatable updater, without the plugin watcher. Must run
    /// inside the runtime (clients spawn tasks).
    pub fn new(config: HostConfig) -> Result<NodeAgent> {
        let host = Arc::new(Host::new(config)?);
        let node_updater = match host.kube() {
            Some(k) if host.config().gate("MutableCSINodeAllocatableCount") => {
                Some(NodeUpdater::new(
                    host.drivers().clone(),
                    k.csidrivers.clone(),
                    k.node_info.clone(),
                    host.config().timeout,
                    crate::runtime::handle()?,
                ))
            }
            _ => None,
        };
        Ok(NodeAgent {
            host,
            node_updater,
            plugin_watcher: OnceLock::new(),
        })
    }

    /// [`NodeAgent::new`], then the plugin watcher if the config asks for it (its workers hold
    /// the agent weakly, so it must already be shared). Must run inside the runtime.
    pub fn start(config: HostConfig) -> Result<Arc<NodeAgent>> {
        let node = Arc::new(NodeAgent::new(config)?);
        if node.config().plugin_watcher {
            let dir = node
                .config()
                .plugins_registry_dir
                .clone()
                .unwrap_or_else(|| node.layout().plugins_registry_dir());
            let watcher = PluginWatcher::start(dir, Arc::downgrade(&node))?;
            let _ = node.plugin_watcher.set(watcher);
        }
        Ok(node)
    }

    /// Stops what [`NodeAgent::start`] started.
    pub fn stop(&self) {
        if let Some(w) = self.plugin_watcher.get() {
            w.stop();
        }
    }

    /// After `name` was registered or deregistered: the allocatable updater follows
    /// (`syncDriverUpdater`).
    pub fn driver_changed(&self, name: &str) {
        if let Some(updater) = &self.node_updater {
            updater.sync(name);
        }
    }

    /// The plugin watcher's status, `None` unless configured.
    pub fn plugin_watcher_status(&self) -> Option<PluginWatcherStatus> {
        self.plugin_watcher.get().map(PluginWatcher::status)
    }
}
