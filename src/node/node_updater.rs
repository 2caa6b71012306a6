//! Upstream's CSINode allocatable updater (`pkg/volume/csi/csi_node_updater.go`, gate
//! `MutableCSINodeAllocatableCount`): while a driver is registered and its CSIDriver sets
//! `nodeAllocatableUpdatePeriodSeconds`, the driver is asked for `NodeGetInfo` every period and
//! its CSINode entry (`allocatable.count`) brought up to date. [`verify_exhausted_resource`]
//! does the same at once when a volume's attach failed for lack of capacity
//! (`csi_plugin.go VerifyExhaustedResource`). One updater per node agent; dropping it (with
//! the agent) stops its tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::csi::driver_store::DriverStore;
use crate::disk::paths::attachment_name;
use crate::error::{Error, Result};
use crate::kube::csidriver_informer::CsiDriverInformer;
use crate::kube::node_info::NodeInfoManager;
use crate::node::NodeAgent;
use crate::spec::VolumeSpec;

/// gRPC `ResourceExhausted`, the code the external attacher records in the VolumeAttachment's
/// `attachError.errorCode` when the node has no room for another volume.
const RESOURCE_EXHAUSTED: i32 = 8;

pub struct NodeUpdater {
    shared: Arc<Shared>,
    /// The periodic task of each registered driver (`driverUpdaters`).
    tasks: Mutex<HashMap<String, JoinHandle<()>>>,
    runtime: Handle,
}

struct Shared {
    drivers: Arc<DriverStore>,
    csidrivers: CsiDriverInformer,
    node_info: Arc<NodeInfoManager>,
    timeout: Duration,
}

impl NodeUpdater {
    pub fn new(
        drivers: Arc<DriverStore>,
        csidrivers: CsiDriverInformer,
        node_info: Arc<NodeInfoManager>,
        timeout: Duration,
        runtime: Handle,
    ) -> NodeUpdater {
        NodeUpdater {
            shared: Arc::new(Shared {
                drivers,
                csidrivers,
                node_info,
                timeout,
            }),
            tasks: Mutex::new(HashMap::new()),
            runtime,
        }
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, JoinHandle<()>>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `syncDriverUpdater`, after `name` was registered or deregistered: a registered driver
    /// gets a fresh task (which waits while its CSIDriver sets no period and follows changes of
    /// it); a deregistered one loses its task.
    pub fn sync(&self, name: &str) {
        let mut tasks = self.tasks();
        if let Some(old) = tasks.remove(name) {
            old.abort();
        }
        if self.shared.drivers.get(name).is_some() {
            let task = self
                .runtime
                .spawn(run(self.shared.clone(), name.to_string()));
            tasks.insert(name.to_string(), task);
        }
    }

    /// `updateCSIDriver` now, for `name`.
    pub async fn update(&self, name: &str) -> Result<()> {
        self.shared.update(name).await
    }

    /// The CSIDriver's `nodeAllocatableUpdatePeriodSeconds`, if set and positive.
    pub fn period(&self, name: &str) -> Option<Duration> {
        self.shared.period(name)
    }
}

impl Drop for NodeUpdater {
    fn drop(&mut self) {
        for (_, task) in self.tasks().drain() {
            task.abort();
        }
    }
}

impl Shared {
    fn period(&self, name: &str) -> Option<Duration> {
        let object = self.csidrivers.get(name).ok().flatten()?;
        let seconds = object.spec.node_allocatable_update_period_seconds?;
        u64::try_from(seconds)
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
    }

    async fn update(&self, name: &str) -> Result<()> {
        let driver = self
            .drivers
            .get(name)
            .filter(|d| d.node_info.is_some())
            .ok_or_else(|| Error::not_found(format!("CSI driver {name:?} is not registered")))?;
        let info = driver
            .client
            .node_get_info(Instant::now() + self.timeout)
            .await
            .map_err(|e| e.context(format!("failed to get NodeGetInfo from driver {name:?}")))?;
        self.node_info
            .update(
                name,
                &info.node_id,
                info.max_volumes_per_node,
                info.topology.as_ref(),
            )
            .await
            .map_err(|e| e.context(format!("failed to update driver {name:?}")))?;
        // `kcsi_list_drivers` reports the current answer.
        self.drivers.complete(name, driver.generation, info);
        Ok(())
    }
}

/// `runPeriodicUpdate`, restarted whenever the driver's period changes (`onDriverUpdate`)
/// and idle while it has none (`onDriverDelete`, or no CSIDriver yet).
async fn run(shared: Arc<Shared>, name: String) {
    let mut changes = shared.csidrivers.changes();
    loop {
        let Some(period) = shared.period(&name) else {
            if changes.changed().await.is_err() {
                return;
            }
            continue;
        };
        tracing::debug!(
            "{}",
            csi_log!("Starting periodic updates for driver {name} every {period:?}")
        );
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    if let Err(e) = shared.update(&name).await {
                        tracing::error!("{}", csi_log!("Failed to update CSIDriver {name}: {e}"));
                    }
                }
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if shared.period(&name) != Some(period) {
                        tracing::debug!("{}", csi_log!("Stopping periodic updates for driver {name} every {period:?}"));
                        break;
                    }
                }
            }
        }
    }
}

/// `VerifyExhaustedResource`: whether the volume's attach failed because the node is out of
/// capacity for the driver (its VolumeAttachment's `attachError.errorCode` is
/// ResourceExhausted); if so the driver's CSINode entry is refreshed from `NodeGetInfo` first.
/// Only drivers whose CSIDriver sets an update period take part. Every lookup failure is
/// logged and answers false, as upstream.
pub async fn verify_exhausted_resource(node: &NodeAgent, spec: &VolumeSpec) -> bool {
    let Some(updater) = node.node_updater.as_ref() else {
        return false;
    };
    let host = &node.host;
    let Ok(src) = spec.persistent_source() else {
        tracing::error!("{}", csi_log!("Invalid volume spec for CSI"));
        return false;
    };
    if updater.period(&src.driver).is_none() {
        return false;
    }
    let name = attachment_name(&src.volume_handle, &src.driver, &host.config().node_name);
    let attachment = match host.volume_attachment(&name).await {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(
                "{}",
                csi_log!("Failed to get volume attachment {name}: {e}")
            );
            return false;
        }
    };
    let code = attachment
        .status
        .and_then(|s| s.attach_error)
        .and_then(|e| e.error_code);
    if code != Some(RESOURCE_EXHAUSTED) {
        return false;
    }
    tracing::info!(
        "{}",
        csi_log!(
            "Detected ResourceExhausted error for volume {} of driver {}",
            src.volume_handle,
            src.driver
        )
    );
    if let Err(e) = updater.update(&src.driver).await {
        tracing::error!(
            "{}",
            csi_log!("Failed to update CSIDriver {}: {e}", src.driver)
        );
    }
    true
}
