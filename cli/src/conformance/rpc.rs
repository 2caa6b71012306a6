//! The CSI calls the suite makes itself, beside kcsi's node calls and the external-attacher's
//! (`crate::driver`): the kubelet's retries of NodeUnpublish / NodeUnstage repeated verbatim.

use std::path::Path;
use std::time::Duration;

use kcsi::proto::csi;
use kcsi::proto::csi::node_client::NodeClient;
use tonic::transport::Channel;

use crate::driver::{request, within};

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
