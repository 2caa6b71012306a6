//! The RPCs the command line makes itself, beside kcsi's node calls: the Identity call the
//! node-driver-registrar makes (GetPluginInfo), the Controller calls the external
//! provisioner makes (CreateVolume, DeleteVolume), and the ones the external-attacher makes
//! (ControllerPublishVolume, ControllerUnpublishVolume).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use kcsi::proto::csi;
use kcsi::proto::csi::controller_client::ControllerClient;
use kcsi::proto::csi::identity_client::IdentityClient;
use kcsi::{Error, ErrorKind, Result};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// A lazily connected channel to a CSI socket.
pub fn channel(socket: &Path) -> Channel {
    let socket: PathBuf = socket.to_path_buf();
    Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(
        move |_: Uri| {
            let socket = socket.clone();
            async move { UnixStream::connect(&socket).await.map(TokioIo::new) }
        },
    ))
}

pub fn request<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(timeout);
    req
}

/// A failed call as a kcsi error, so it reports like kcsi's own (gRPC code, class final).
fn failed(method: &str, status: tonic::Status) -> Error {
    if let Some(source) = std::error::Error::source(&status) {
        return Error::new(ErrorKind::Unavailable, format!("{method} failed: {source}"));
    }
    let kind = if status.code() == tonic::Code::DeadlineExceeded {
        ErrorKind::Timeout
    } else {
        ErrorKind::Driver
    };
    Error::new(
        kind,
        format!(
            "{method} failed: rpc error: code = {:?} desc = {}",
            status.code(),
            status.message()
        ),
    )
    .with_grpc_code(status.code() as i32)
}

pub async fn within<T>(
    method: &str,
    timeout: Duration,
    call: impl std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(failed(method, status)),
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("{method} got no answer within {timeout:?}"),
        )),
    }
}

/// The driver's name and version.
pub async fn plugin_info(ch: &Channel, timeout: Duration) -> Result<(String, String)> {
    let mut c = IdentityClient::new(ch.clone());
    let resp = within(
        "GetPluginInfo",
        timeout,
        c.get_plugin_info(request(csi::GetPluginInfoRequest {}, timeout)),
    )
    .await?;
    if resp.name.is_empty() {
        return Err(Error::new(
            ErrorKind::Driver,
            "GetPluginInfo answered an empty driver name",
        ));
    }
    Ok((resp.name, resp.vendor_version))
}

/// Whether the driver has a Controller service (GetPluginCapabilities CONTROLLER_SERVICE),
/// so volumes are made with CreateVolume rather than given by handle.
pub async fn has_controller(ch: &Channel, timeout: Duration) -> Result<bool> {
    use csi::plugin_capability::{service, Type};
    let mut c = IdentityClient::new(ch.clone());
    let resp = within(
        "GetPluginCapabilities",
        timeout,
        c.get_plugin_capabilities(request(csi::GetPluginCapabilitiesRequest {}, timeout)),
    )
    .await?;
    Ok(resp.capabilities.iter().any(|c| {
        matches!(&c.r#type, Some(Type::Service(s))
            if s.r#type == service::Type::ControllerService as i32)
    }))
}

/// What CreateVolume is asked for.
pub struct NewVolume<'a> {
    pub name: String,
    pub bytes: i64,
    pub block: bool,
    pub fs_type: &'a str,
    pub mount_flags: Vec<String>,
    pub access_mode: csi::volume_capability::access_mode::Mode,
    pub parameters: HashMap<String, String>,
    pub secrets: HashMap<String, String>,
    /// The one topology segment the volume must be accessible from (the node's).
    pub topology: Option<BTreeMap<String, String>>,
}

fn capability(
    block: bool,
    fs_type: &str,
    mount_flags: Vec<String>,
    access_mode: csi::volume_capability::access_mode::Mode,
) -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
    let access_type = if block {
        AccessType::Block(BlockVolume {})
    } else {
        AccessType::Mount(MountVolume {
            fs_type: fs_type.to_string(),
            mount_flags,
            volume_mount_group: String::new(),
        })
    };
    csi::VolumeCapability {
        access_mode: Some(AccessMode {
            mode: access_mode as i32,
        }),
        access_type: Some(access_type),
    }
}

pub async fn create_volume(
    ch: &Channel,
    v: NewVolume<'_>,
    timeout: Duration,
) -> Result<csi::Volume> {
    let topology = v.topology.map(|segments| {
        let t = csi::Topology {
            segments: segments.into_iter().collect(),
        };
        csi::TopologyRequirement {
            requisite: vec![t.clone()],
            preferred: vec![t],
        }
    });
    let req = csi::CreateVolumeRequest {
        name: v.name,
        capacity_range: Some(csi::CapacityRange {
            required_bytes: v.bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![capability(v.block, v.fs_type, v.mount_flags, v.access_mode)],
        parameters: v.parameters,
        secrets: v.secrets,
        accessibility_requirements: topology,
    };
    let mut c = ControllerClient::new(ch.clone());
    let resp = within(
        "CreateVolume",
        timeout,
        c.create_volume(request(req, timeout)),
    )
    .await?;
    resp.volume
        .filter(|v| !v.volume_id.is_empty())
        .ok_or_else(|| Error::new(ErrorKind::Driver, "CreateVolume answered no volume id"))
}

pub async fn delete_volume(
    ch: &Channel,
    volume_id: &str,
    secrets: HashMap<String, String>,
    timeout: Duration,
) -> Result<()> {
    let req = csi::DeleteVolumeRequest {
        volume_id: volume_id.to_string(),
        secrets,
    };
    let mut c = ControllerClient::new(ch.clone());
    within(
        "DeleteVolume",
        timeout,
        c.delete_volume(request(req, timeout)),
    )
    .await
    .map(drop)
}

/// ControllerExpandVolume, as the external-resizer calls it before the kubelet's NodeExpand:
/// the new capacity and whether the node must expand too.
pub async fn controller_expand(
    ch: &Channel,
    volume_id: &str,
    bytes: i64,
    secrets: HashMap<String, String>,
    timeout: Duration,
) -> Result<(i64, bool)> {
    let req = csi::ControllerExpandVolumeRequest {
        volume_id: volume_id.to_string(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        secrets,
        volume_capability: None,
    };
    let mut c = ControllerClient::new(ch.clone());
    let resp = within(
        "ControllerExpandVolume",
        timeout,
        c.controller_expand_volume(request(req, timeout)),
    )
    .await?;
    Ok((resp.capacity_bytes, resp.node_expansion_required))
}

/// Whether the driver's Controller service attaches (ControllerGetCapabilities
/// PUBLISH_UNPUBLISH_VOLUME), so a volume needs ControllerPublishVolume before NodeStage.
pub async fn publishes_volumes(ch: &Channel, timeout: Duration) -> Result<bool> {
    use csi::controller_service_capability::{rpc, Type};
    let mut c = ControllerClient::new(ch.clone());
    let resp = within(
        "ControllerGetCapabilities",
        timeout,
        c.controller_get_capabilities(request(csi::ControllerGetCapabilitiesRequest {}, timeout)),
    )
    .await?;
    Ok(resp.capabilities.iter().any(|c| {
        matches!(&c.r#type, Some(Type::Rpc(r))
            if r.r#type == rpc::Type::PublishUnpublishVolume as i32)
    }))
}

/// What ControllerPublishVolume is asked for.
pub struct Publish<'a> {
    pub volume_id: &'a str,
    pub node_id: &'a str,
    pub block: bool,
    pub fs_type: &'a str,
    pub mount_flags: Vec<String>,
    pub access_mode: csi::volume_capability::access_mode::Mode,
    pub read_only: bool,
    pub volume_context: HashMap<String, String>,
    pub secrets: HashMap<String, String>,
}

/// ControllerPublishVolume: the publish context NodeStage and NodePublish carry.
pub async fn controller_publish(
    ch: &Channel,
    p: Publish<'_>,
    timeout: Duration,
) -> Result<BTreeMap<String, String>> {
    let req = csi::ControllerPublishVolumeRequest {
        volume_id: p.volume_id.to_string(),
        node_id: p.node_id.to_string(),
        volume_capability: Some(capability(p.block, p.fs_type, p.mount_flags, p.access_mode)),
        readonly: p.read_only,
        secrets: p.secrets,
        volume_context: p.volume_context,
    };
    let mut c = ControllerClient::new(ch.clone());
    let resp = within(
        "ControllerPublishVolume",
        timeout,
        c.controller_publish_volume(request(req, timeout)),
    )
    .await?;
    Ok(resp.publish_context.into_iter().collect())
}

pub async fn controller_unpublish(
    ch: &Channel,
    volume_id: &str,
    node_id: &str,
    secrets: HashMap<String, String>,
    timeout: Duration,
) -> Result<()> {
    let req = csi::ControllerUnpublishVolumeRequest {
        volume_id: volume_id.to_string(),
        node_id: node_id.to_string(),
        secrets,
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
