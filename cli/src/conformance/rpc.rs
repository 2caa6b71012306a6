//! The CSI calls the suite makes itself, beside kcsi's node calls: the external-attacher's
//! ControllerPublish / ControllerUnpublish, and the kubelet's retries of NodeUnpublish /
//! NodeUnstage repeated verbatim.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use kcsi::proto::csi;
use kcsi::proto::csi::controller_client::ControllerClient;
use kcsi::proto::csi::node_client::NodeClient;
use kcsi::proto::csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use tonic::transport::Channel;

use crate::driver::{request, within};

/// The capability a volume is created and attached with.
pub fn capability(
    block: bool,
    mode: csi::volume_capability::access_mode::Mode,
) -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(if block {
            AccessType::Block(BlockVolume {})
        } else {
            AccessType::Mount(MountVolume::default())
        }),
    }
}

/// ControllerPublishVolume as the external-attacher sends it: the publish context.
pub async fn controller_publish(
    ch: &Channel,
    volume_id: &str,
    node_id: &str,
    capability: csi::VolumeCapability,
    readonly: bool,
    timeout: Duration,
) -> kcsi::Result<HashMap<String, String>> {
    let req = csi::ControllerPublishVolumeRequest {
        volume_id: volume_id.to_string(),
        node_id: node_id.to_string(),
        volume_capability: Some(capability),
        readonly,
        ..Default::default()
    };
    let mut c = ControllerClient::new(ch.clone());
    let resp = within(
        "ControllerPublishVolume",
        timeout,
        c.controller_publish_volume(request(req, timeout)),
    )
    .await?;
    Ok(resp.publish_context)
}

pub async fn controller_unpublish(
    ch: &Channel,
    volume_id: &str,
    node_id: &str,
    timeout: Duration,
) -> kcsi::Result<()> {
    let req = csi::ControllerUnpublishVolumeRequest {
        volume_id: volume_id.to_string(),
        node_id: node_id.to_string(),
    };
    let mut c = ControllerClient::new(ch.clone());
    within(
        "ControllerUnpublishVolume",
        timeout,
        c.controller_unpublish_volume(request(req, timeout)),
    )
    .await
    .map(drop)
}

pub async fn node_unpublish(
    ch: &Channel,
    volume_id: &str,
    target: &Path,
    timeout: Duration,
) -> kcsi::Result<()> {
    let req = csi::NodeUnpublishVolumeRequest {
        volume_id: volume_id.to_string(),
        target_path: target.display().to_string(),
    };
    let mut n = NodeClient::new(ch.clone());
    within(
        "NodeUnpublishVolume",
        timeout,
        n.node_unpublish_volume(request(req, timeout)),
    )
    .await
    .map(drop)
}

pub async fn node_unstage(
    ch: &Channel,
    volume_id: &str,
    staging: &Path,
    timeout: Duration,
) -> kcsi::Result<()> {
    let req = csi::NodeUnstageVolumeRequest {
        volume_id: volume_id.to_string(),
        staging_target_path: staging.display().to_string(),
    };
    let mut n = NodeClient::new(ch.clone());
    within(
        "NodeUnstageVolume",
        timeout,
        n.node_unstage_volume(request(req, timeout)),
    )
    .await
    .map(drop)
}
