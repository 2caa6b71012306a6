//! Kubernetes access for a host with a kubeconfig: the API client, the watched CSIDriver
//! objects (or those the host program feeds, `"csiDriversFromHost"`), direct reads (VolumeAttachment, Secret, TokenRequest), the token cache, the node
//! info manager and the CSINode start-up task; on a controller host the watched
//! VolumeAttachments instead of the CSINode start-up. Standalone hosts have none of this.

mod backoff;
pub mod client;
pub mod csidriver_informer;
pub mod csinode_init;
pub mod informer;
pub mod kubeconfig;
pub mod node_info;
pub mod objects;
mod plain_http;
pub mod token_manager;
pub mod volumeattachment_informer;

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::config::{HostConfig, KubeconfigSource};
use crate::error::Result;
use crate::telemetry::Telemetry;
use client::ApiClient;
use csidriver_informer::{CsiDriverFeed, CsiDriverInformer};
use csinode_init::Startup;
use node_info::NodeInfoManager;
use token_manager::TokenManager;
use volumeattachment_informer::{VolumeAttachmentFeed, VolumeAttachmentInformer};

pub struct Kube {
    pub api: ApiClient,
    pub csidrivers: CsiDriverInformer,
    /// With `"csiDriversFromHost"`: how the host program keeps `csidrivers` current.
    pub csidriver_feed: Option<CsiDriverFeed>,
    pub node_info: Arc<NodeInfoManager>,
    pub startup: Arc<Startup>,
    /// Service-account tokens for `tokenRequests`, reused as the kubelet's token manager does.
    pub tokens: TokenManager,
    /// Controller hosts only: the watched VolumeAttachments Attach and Detach wait on.
    pub volume_attachments: Option<VolumeAttachmentInformer>,
    /// With `"volumeAttachmentsFromHost"`: how the host program keeps `volume_attachments`
    /// current.
    pub volume_attachment_feed: Option<VolumeAttachmentFeed>,
    /// The watches and the CSINode start-up; aborted when the host goes.
    tasks: Vec<JoinHandle<()>>,
}

impl Kube {
    /// Builds the client and starts the background tasks; sends no request itself, so a
    /// missing API server does not delay the host.
    pub fn start(
        config: &HostConfig,
        kubeconfig: KubeconfigSource<'_>,
        telemetry: &Telemetry,
    ) -> Result<Kube> {
        let runtime = crate::runtime::handle()?;
        let _enter = runtime.enter();
        let api = ApiClient::recording(kubeconfig, telemetry.clone())?;
        let mut tasks = Vec::new();
        let (csidrivers, csidriver_feed) = if config.csi_drivers_from_host {
            let (informer, feed) = CsiDriverInformer::fed();
            (informer, Some(feed))
        } else {
            let (informer, watch) = CsiDriverInformer::start(api.client.clone(), &runtime);
            tasks.push(watch);
            (informer, None)
        };
        let node_info = Arc::new(NodeInfoManager::new(
            api.clone(),
            &config.node_name,
            node_info::migrated_plugins(config),
            config.timeout,
        ));
        let startup = Arc::new(Startup::default());
        // The attach/detach controller has no node of its own: no CSINode to initialise.
        let (volume_attachments, volume_attachment_feed) = if !config.is_controller() {
            tasks.push(runtime.spawn(csinode_init::run(node_info.clone(), startup.clone())));
            (None, None)
        } else if config.volume_attachments_from_host {
            let (informer, feed) = VolumeAttachmentInformer::fed();
            (Some(informer), Some(feed))
        } else {
            let (informer, watch) = VolumeAttachmentInformer::start(api.client.clone(), &runtime);
            tasks.push(watch);
            (Some(informer), None)
        };
        Ok(Kube {
            api,
            csidrivers,
            csidriver_feed,
            node_info,
            startup,
            tokens: TokenManager::default(),
            volume_attachments,
            volume_attachment_feed,
            tasks,
        })
    }
}

impl Drop for Kube {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
