//! What the driver says it is and can do, asked once before the cases run (straight at its
//! socket, never through a case's fault proxy): they decide which cases apply.

use std::time::Duration;

use kcsi::proto::csi;
use kcsi::proto::csi::controller_client::ControllerClient;
use kcsi::proto::csi::node_client::NodeClient;
use kcsi::NodeCapabilities;
use tonic::transport::Channel;

use crate::driver::{self, request, within};

pub struct Facts {
    pub driver: String,
    pub vendor_version: String,
    /// GetPluginCapabilities CONTROLLER_SERVICE.
    pub controller: bool,
    pub create_delete: bool,
    pub publish_unpublish: bool,
    pub controller_expand: bool,
    pub node: NodeCapabilities,
    pub node_id: String,
    pub max_volumes: i64,
}

impl Facts {
    /// The node capabilities as their CSI names, for the run's first line.
    pub fn node_caps(&self) -> Vec<&'static str> {
        let n = &self.node;
        [
            (n.stage_unstage, "STAGE_UNSTAGE_VOLUME"),
            (n.get_volume_stats, "GET_VOLUME_STATS"),
            (n.expand_volume, "EXPAND_VOLUME"),
            (n.volume_condition, "VOLUME_CONDITION"),
            (n.single_node_multi_writer, "SINGLE_NODE_MULTI_WRITER"),
            (n.volume_mount_group, "VOLUME_MOUNT_GROUP"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }

    pub fn controller_caps(&self) -> Vec<&'static str> {
        [
            (self.create_delete, "CREATE_DELETE_VOLUME"),
            (self.publish_unpublish, "PUBLISH_UNPUBLISH_VOLUME"),
            (self.controller_expand, "EXPAND_VOLUME"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// Asks GetPluginInfo, GetPluginCapabilities, ControllerGetCapabilities (with a Controller
/// service), NodeGetCapabilities and NodeGetInfo, each within `timeout`.
pub async fn gather(ch: &Channel, timeout: Duration) -> kcsi::Result<Facts> {
    let (driver, vendor_version) = driver::plugin_info(ch, timeout).await?;
    let controller = driver::has_controller(ch, timeout).await?;
    let (mut create_delete, mut publish_unpublish, mut controller_expand) = (false, false, false);
    if controller {
        use csi::controller_service_capability::rpc::Type;
        use csi::controller_service_capability::Type as Cap;
        let mut c = ControllerClient::new(ch.clone());
        let resp = within(
            "ControllerGetCapabilities",
            timeout,
            c.controller_get_capabilities(request(
                csi::ControllerGetCapabilitiesRequest {},
                timeout,
            )),
        )
        .await?;
        for cap in &resp.capabilities {
            if let Some(Cap::Rpc(rpc)) = &cap.r#type {
                match Type::try_from(rpc.r#type) {
                    Ok(Type::CreateDeleteVolume) => create_delete = true,
                    Ok(Type::PublishUnpublishVolume) => publish_unpublish = true,
                    Ok(Type::ExpandVolume) => controller_expand = true,
                    _ => {}
                }
            }
        }
    }
    let node = node_capabilities(ch, timeout).await?;
    let mut n = NodeClient::new(ch.clone());
    let info = within(
        "NodeGetInfo",
        timeout,
        n.node_get_info(request(csi::NodeGetInfoRequest {}, timeout)),
    )
    .await?;
    Ok(Facts {
        driver,
        vendor_version,
        controller,
        create_delete,
        publish_unpublish,
        controller_expand,
        node,
        node_id: info.node_id,
        max_volumes: info.max_volumes_per_node,
    })
}

pub async fn node_capabilities(ch: &Channel, timeout: Duration) -> kcsi::Result<NodeCapabilities> {
    let mut n = NodeClient::new(ch.clone());
    let resp = within(
        "NodeGetCapabilities",
        timeout,
        n.node_get_capabilities(request(csi::NodeGetCapabilitiesRequest {}, timeout)),
    )
    .await?;
    Ok(NodeCapabilities::from_response(&resp))
}
