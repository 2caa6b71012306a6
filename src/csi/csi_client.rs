//! CSI v1 client for one driver: one lazily connected gRPC channel over the driver's Unix
//! socket, reused for every RPC (upstream dials per RPC), with node capabilities cached per
//! connection so a restarted driver is probed again.
//!
//! Knows CSI, not Kubernetes: callers pass plain values and get plain values back.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

use crate::csi::proto::csi;
use crate::csi::proto::csi::node_client::NodeClient;
use crate::error::{Error, ErrorKind, Result};
use crate::goquote::quote;

/// Linux `sun_path` holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// What `NodeGetInfo` reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub node_id: String,
    pub max_volumes_per_node: i64,
    /// `None` when the driver reported no accessible topology.
    pub topology: Option<BTreeMap<String, String>>,
}

/// The node service capabilities the kubelet side acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCapabilities {
    pub stage_unstage: bool,
    pub get_volume_stats: bool,
    pub expand_volume: bool,
    pub volume_condition: bool,
    pub single_node_multi_writer: bool,
    pub volume_mount_group: bool,
}

/// Turns a registrar-reported endpoint (`/path`, `unix:///path`, `unix:/path`) into the socket
/// path, refusing what cannot be a Unix socket address.
pub fn socket_path(endpoint: &str) -> Result<PathBuf> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    if path.is_empty() {
        return Err(Error::invalid(format!(
            "endpoint {} names no socket path",
            quote(endpoint)
        )));
    }
    if !path.starts_with('/') {
        return Err(Error::invalid(format!(
            "endpoint {} is not an absolute Unix socket path",
            quote(endpoint)
        )));
    }
    if path.len() > MAX_SOCKET_PATH {
        return Err(Error::invalid(format!(
            "endpoint {} is {} bytes long; a Unix socket path holds at most {MAX_SOCKET_PATH}",
            quote(endpoint),
            path.len()
        )));
    }
    Ok(PathBuf::from(path))
}

#[derive(Clone)]
pub struct CsiClient {
    inner: Arc<Inner>,
}

struct Inner {
    driver: String,
    socket: PathBuf,
    channel: Channel,
    /// Counts connections the channel opened; a new connection may be a new driver process.
    connections: Arc<AtomicU64>,
    /// Capabilities and the connection count they were probed on.
    caps: Mutex<Option<(u64, NodeCapabilities)>>,
}

/// Marks errors that happened before any driver answered, so they are never taken for a
/// status the driver returned.
#[derive(Debug)]
struct ConnectFailed(String);

impl std::fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectFailed {}

impl CsiClient {
    /// A client for `driver` at `endpoint`. Connects lazily; must run inside the runtime.
    pub fn new(driver: &str, endpoint: &str) -> Result<CsiClient> {
        let socket = socket_path(endpoint)?;
        let connections = Arc::new(AtomicU64::new(0));
        let counter = connections.clone();
        let path = socket.clone();
        // The URI is required by the HTTP/2 layer but never resolved: the connector dials the
        // socket. Authority "localhost" as upstream uses.
        let channel = Endpoint::from_static("http://localhost").connect_with_connector_lazy(
            tower::service_fn(move |_: Uri| {
                let path = path.clone();
                let counter = counter.clone();
                async move {
                    let stream = UnixStream::connect(&path).await.map_err(|e| {
                        ConnectFailed(format!("cannot connect to {}: {e}", path.display()))
                    })?;
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, ConnectFailed>(TokioIo::new(stream))
                }
            }),
        );
        Ok(CsiClient {
            inner: Arc::new(Inner {
                driver: driver.to_string(),
                socket,
                channel,
                connections,
                caps: Mutex::new(None),
            }),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.inner.socket
    }

    /// Runs one RPC against the deadline. A transport failure on an already open connection
    /// (driver restarted, stale connection) is retried once: CSI node RPCs are idempotent.
    async fn call<T, F, Fut>(&self, method: &str, deadline: Instant, rpc: F) -> Result<T>
    where
        F: Fn(NodeClient<Channel>, std::time::Duration) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let mut attempt = 0;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(self.timeout(method));
            }
            let client = NodeClient::new(self.inner.channel.clone());
            let result = tokio::time::timeout_at(deadline, rpc(client, remaining)).await;
            match result {
                Err(_) => return Err(self.timeout(method)),
                Ok(Ok(resp)) => return Ok(resp.into_inner()),
                Ok(Err(status)) => {
                    let transport = std::error::Error::source(&status).is_some();
                    let never_connected = is_connect_failure(&status);
                    if transport && !never_connected && attempt == 0 {
                        attempt += 1;
                        tracing::debug!(driver = %self.inner.driver, method, "retrying after transport error: {status}");
                        continue;
                    }
                    return Err(self.status_error(method, &status));
                }
            }
        }
    }

    fn timeout(&self, method: &str) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{method} to CSI driver {} at {} did not finish before the deadline",
                quote(&self.inner.driver),
                self.inner.socket.display()
            ),
        )
    }

    fn status_error(&self, method: &str, status: &Status) -> Error {
        let what = format!(
            "{method} to CSI driver {} at {} failed",
            quote(&self.inner.driver),
            self.inner.socket.display()
        );
        if std::error::Error::source(status).is_some() {
            // Never reached the driver, or the connection broke: no driver-returned code.
            let detail = std::error::Error::source(status)
                .map_or_else(|| status.message().to_string(), |s| s.to_string());
            return Error::new(ErrorKind::Unavailable, format!("{what}: {detail}"));
        }
        let kind = if status.code() == Code::DeadlineExceeded {
            ErrorKind::Timeout
        } else {
            ErrorKind::Driver
        };
        Error::new(kind, format!("{what}: {}", go_status_text(status)))
            .with_grpc_code(status.code() as i32)
    }

    pub async fn node_get_info(&self, deadline: Instant) -> Result<NodeInfo> {
        let resp = self
            .call("NodeGetInfo", deadline, |mut c, t| async move {
                c.node_get_info(with_timeout(csi::NodeGetInfoRequest {}, t))
                    .await
            })
            .await?;
        Ok(NodeInfo {
            node_id: resp.node_id,
            max_volumes_per_node: resp.max_volumes_per_node,
            topology: resp
                .accessible_topology
                .map(|t| t.segments.into_iter().collect()),
        })
    }

    /// The driver's node capabilities, probed once per connection.
    pub async fn capabilities(&self, deadline: Instant) -> Result<NodeCapabilities> {
        let generation = self.inner.connections.load(Ordering::SeqCst);
        if let Some((seen, caps)) = *self.inner.caps.lock().unwrap_or_else(|p| p.into_inner()) {
            if seen == generation && generation > 0 {
                return Ok(caps);
            }
        }
        let resp = self
            .call("NodeGetCapabilities", deadline, |mut c, t| async move {
                c.node_get_capabilities(with_timeout(csi::NodeGetCapabilitiesRequest {}, t))
                    .await
            })
            .await?;
        let caps = parse_capabilities(&resp);
        let generation = self.inner.connections.load(Ordering::SeqCst);
        *self.inner.caps.lock().unwrap_or_else(|p| p.into_inner()) = Some((generation, caps));
        Ok(caps)
    }

    pub async fn node_stage(
        &self,
        req: csi::NodeStageVolumeRequest,
        deadline: Instant,
    ) -> Result<()> {
        require(&req.volume_id, "missing volume id")?;
        require(&req.staging_target_path, "missing staging target path")?;
        self.call("NodeStageVolume", deadline, |mut c, t| {
            let req = req.clone();
            async move { c.node_stage_volume(with_timeout(req, t)).await }
        })
        .await
        .map(drop)
        .map_err(mark_in_progress)
    }

    pub async fn node_unstage(
        &self,
        volume_id: &str,
        staging_target_path: &str,
        deadline: Instant,
    ) -> Result<()> {
        require(volume_id, "missing volume id")?;
        require(staging_target_path, "missing staging target path")?;
        let req = csi::NodeUnstageVolumeRequest {
            volume_id: volume_id.to_string(),
            staging_target_path: staging_target_path.to_string(),
        };
        self.call("NodeUnstageVolume", deadline, |mut c, t| {
            let req = req.clone();
            async move { c.node_unstage_volume(with_timeout(req, t)).await }
        })
        .await
        .map(drop)
    }

    pub async fn node_publish(
        &self,
        req: csi::NodePublishVolumeRequest,
        deadline: Instant,
    ) -> Result<()> {
        require(&req.volume_id, "missing volume id")?;
        require(&req.target_path, "missing target path")?;
        self.call("NodePublishVolume", deadline, |mut c, t| {
            let req = req.clone();
            async move { c.node_publish_volume(with_timeout(req, t)).await }
        })
        .await
        .map(drop)
        .map_err(mark_in_progress)
    }

    pub async fn node_unpublish(
        &self,
        volume_id: &str,
        target_path: &str,
        deadline: Instant,
    ) -> Result<()> {
        require(volume_id, "missing volume id")?;
        require(target_path, "missing target path")?;
        let req = csi::NodeUnpublishVolumeRequest {
            volume_id: volume_id.to_string(),
            target_path: target_path.to_string(),
        };
        self.call("NodeUnpublishVolume", deadline, |mut c, t| {
            let req = req.clone();
            async move { c.node_unpublish_volume(with_timeout(req, t)).await }
        })
        .await
        .map(drop)
    }

    pub async fn node_get_volume_stats(
        &self,
        volume_id: &str,
        volume_path: &str,
        deadline: Instant,
    ) -> Result<csi::NodeGetVolumeStatsResponse> {
        require(volume_id, "missing volume id")?;
        require(volume_path, "missing target path")?;
        let req = csi::NodeGetVolumeStatsRequest {
            volume_id: volume_id.to_string(),
            volume_path: volume_path.to_string(),
            staging_target_path: String::new(),
        };
        self.call("NodeGetVolumeStats", deadline, |mut c, t| {
            let req = req.clone();
            async move { c.node_get_volume_stats(with_timeout(req, t)).await }
        })
        .await
    }

    pub async fn node_expand(
        &self,
        req: csi::NodeExpandVolumeRequest,
        deadline: Instant,
    ) -> Result<i64> {
        require(&req.volume_id, "missing volume id")?;
        require(&req.volume_path, "missing volume path")?;
        if req
            .capacity_range
            .as_ref()
            .is_some_and(|r| r.required_bytes < 0)
        {
            return Err(Error::invalid("size can not be less than 0"));
        }
        let resp = self
            .call("NodeExpandVolume", deadline, |mut c, t| {
                let req = req.clone();
                async move { c.node_expand_volume(with_timeout(req, t)).await }
            })
            .await
            .map_err(mark_in_progress)?;
        Ok(resp.capacity_bytes)
    }
}

fn require(value: &str, message: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(message));
    }
    Ok(())
}

fn with_timeout<T>(msg: T, timeout: std::time::Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(timeout);
    req
}

fn is_connect_failure(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if err.downcast_ref::<ConnectFailed>().is_some() {
            return true;
        }
        source = err.source();
    }
    false
}

/// Go gRPC's error text, which driver authors grep for: `rpc error: code = X desc = Y`.
pub(crate) fn go_status_text(status: &Status) -> String {
    let code = match status.code() {
        Code::Cancelled => "Canceled".to_string(),
        c => format!("{c:?}"),
    };
    format!("rpc error: code = {code} desc = {}", status.message())
}

fn parse_capabilities(resp: &csi::NodeGetCapabilitiesResponse) -> NodeCapabilities {
    use csi::node_service_capability::rpc::Type;
    use csi::node_service_capability::Type as Cap;
    let mut caps = NodeCapabilities::default();
    for cap in &resp.capabilities {
        let Some(Cap::Rpc(rpc)) = &cap.r#type else {
            continue;
        };
        match Type::try_from(rpc.r#type) {
            Ok(Type::StageUnstageVolume) => caps.stage_unstage = true,
            Ok(Type::GetVolumeStats) => caps.get_volume_stats = true,
            Ok(Type::ExpandVolume) => caps.expand_volume = true,
            Ok(Type::VolumeCondition) => caps.volume_condition = true,
            Ok(Type::SingleNodeMultiWriter) => caps.single_node_multi_writer = true,
            Ok(Type::VolumeMountGroup) => caps.volume_mount_group = true,
            _ => {}
        }
    }
    caps
}

/// A failed stage/publish/expand is uncertain when the driver may still be working on it, as
/// upstream's `csi_client.go` NodeStageVolume / NodePublishVolume / NodeExpandVolume mark it
/// (`volumetypes.NewUncertainProgressError` unless `isFinalError`); final otherwise.
fn mark_in_progress(err: Error) -> Error {
    if may_be_in_progress(&err) {
        err.uncertain()
    } else {
        err
    }
}

/// Upstream's `isFinalError` inverted: anything that is not a driver status, and the codes
/// Canceled, DeadlineExceeded, Unavailable, ResourceExhausted and Aborted.
fn may_be_in_progress(err: &Error) -> bool {
    match err.grpc_code() {
        None => matches!(err.kind(), ErrorKind::Unavailable | ErrorKind::Timeout),
        Some(code) => matches!(
            Code::from_i32(code),
            Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Unavailable
                | Code::ResourceExhausted
                | Code::Aborted
        ),
    }
}
