//! CSINode start-up (upstream `initializeCSINode`): wait for the API server, then create or
//! update this node's CSINode, reporting progress the way upstream uses `SetKubeletError`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::backoff;
use super::node_info::NodeInfoManager;

const NOT_YET: &str = "CSINode is not yet initialized";
/// Upstream's `waitForAPIServerForever` period.
const PROBE_PERIOD: Duration = Duration::from_secs(1);
/// Upstream exits the kubelet (`klog.Fatalf`) when `initBackoff` runs out; a library must not
/// end its host process, so kcsi keeps trying at this period and keeps reporting the error.
const RETRY_PERIOD: Duration = Duration::from_secs(10);

/// Whether the CSINode is initialised, and if not, why (the host's `lastError`).
pub struct Startup {
    state: Mutex<(bool, Option<String>)>,
}

impl Default for Startup {
    fn default() -> Self {
        Startup {
            state: Mutex::new((false, Some(NOT_YET.to_string()))),
        }
    }
}

impl Startup {
    /// `(csiNodeInitialized, lastError)`.
    pub fn snapshot(&self) -> (bool, Option<String>) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, initialized: bool, error: Option<String>) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = (initialized, error);
    }
}

/// Runs until the CSINode is initialised; the host aborts it when freed.
pub async fn run(nim: Arc<NodeInfoManager>, startup: Arc<Startup>) {
    while let Err(e) = nim.api_server_reachable().await {
        tracing::debug!("{}", csi_log!("waiting for the API server: {e}"));
        tokio::time::sleep(PROBE_PERIOD).await;
    }
    let mut failures = 0;
    loop {
        match nim.initialize_csinode().await {
            Ok(()) => {
                tracing::info!("{}", csi_log!("CSINode initialized"));
                startup.set(true, None);
                return;
            }
            Err(e) => {
                let message = format!("failed to initialize CSINode: {e}");
                tracing::warn!("{}", csi_log!("{message}"));
                startup.set(false, Some(message));
            }
        }
        let pause = if failures + 1 < backoff::INIT.steps {
            backoff::INIT.pause(failures)
        } else {
            if failures + 1 == backoff::INIT.steps {
                tracing::error!("{}", csi_log!("Failed to initialize CSINode after retrying; retrying every {RETRY_PERIOD:?}"));
            }
            RETRY_PERIOD
        };
        failures += 1;
        tokio::time::sleep(pause).await;
    }
}
