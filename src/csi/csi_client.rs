//! CSI v1 client for one driver: one lazily dialled HTTP/2 connection to the driver's Unix
//! socket, reused for every RPC (upstream dials per RPC) and closed once it has been idle for
//! the host's `idleConnectionSeconds` (a node with many drivers would otherwise hold a socket
//! and its HTTP/2 buffers per driver forever), with node capabilities cached per connection so
//! a restarted driver is probed again.
//!
//! Knows CSI, not Kubernetes: callers pass plain values and get plain values back.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tonic::{Code, Status};

use crate::csi::connection::{ConnectFailed, Connection};
use crate::csi::proto::csi;
use crate::csi::proto::csi::node_client::NodeClient;
use crate::error::{Error, ErrorKind, Result};
use crate::goquote::quote;
use crate::grpcgo::{code_name, go_status_text};
use crate::telemetry::{CsiRecorder, Telemetry, NON_GRPC};

// The gRPC full method names, as upstream's metrics and csi-lib-utils' call logs name them.
const NODE_GET_INFO: &str = "/csi.v1.Node/NodeGetInfo";
const NODE_GET_CAPABILITIES: &str = "/csi.v1.Node/NodeGetCapabilities";
const NODE_STAGE_VOLUME: &str = "/csi.v1.Node/NodeStageVolume";
const NODE_UNSTAGE_VOLUME: &str = "/csi.v1.Node/NodeUnstageVolume";
const NODE_PUBLISH_VOLUME: &str = "/csi.v1.Node/NodePublishVolume";
const NODE_UNPUBLISH_VOLUME: &str = "/csi.v1.Node/NodeUnpublishVolume";
const NODE_GET_VOLUME_STATS: &str = "/csi.v1.Node/NodeGetVolumeStats";
const NODE_EXPAND_VOLUME: &str = "/csi.v1.Node/NodeExpandVolume";

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
    /// Labels this view's RPCs `migrated="true"` (upstream's `additionalInfo` in the context).
    migrated: bool,
}

struct Inner {
    driver: String,
    socket: PathBuf,
    /// How long the connection may stay unused before it is closed.
    idle: Duration,
    conn: Mutex<Conn>,
    /// Counts connections opened; a new connection may be a new driver process.
    connections: Arc<AtomicU64>,
    /// Capabilities and the connection count they were probed on.
    caps: Mutex<Option<(u64, NodeCapabilities)>>,
    metrics: CsiRecorder,
}

/// The open connection, if any, and what decides when it is idle.
struct Conn {
    connection: Option<Connection>,
    /// RPCs holding the connection; it is never closed under them.
    in_flight: usize,
    last_used: Instant,
}

/// One RPC's hold on the connection: while any is held it stays open, and the last
/// one released starts the idle clock.
struct Lease<'a>(&'a Arc<Inner>);

impl<'a> Lease<'a> {
    /// The connection for one RPC, a new one if the last was closed for idleness, failed to
    /// dial or broke; a new connection gets a task that closes it once it has been idle long
    /// enough. Must run inside the runtime.
    fn take(inner: &'a Arc<Inner>) -> (Connection, Lease<'a>) {
        let mut conn = inner.conn();
        conn.in_flight += 1;
        let connection = match &conn.connection {
            Some(connection) if !connection.is_done() => connection.clone(),
            previous => {
                // A replaced connection's idle closer is still running and serves the new one.
                let closer = previous.is_none();
                let connection = Connection::lazy(&inner.socket, inner.connections.clone());
                conn.connection = Some(connection.clone());
                if closer {
                    tokio::spawn(close_when_idle(Arc::downgrade(inner)));
                }
                connection
            }
        };
        (connection, Lease(inner))
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut conn = self.0.conn();
        conn.in_flight -= 1;
        conn.last_used = Instant::now();
    }
}

impl Inner {
    fn conn(&self) -> MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drops the connection once no RPC has held it for `idle`; hyper then closes it.
/// Holds the client weakly: a dropped client takes its connection with it.
async fn close_when_idle(inner: Weak<Inner>) {
    loop {
        let wake = {
            let Some(inner) = inner.upgrade() else { return };
            let mut conn = inner.conn();
            let now = Instant::now();
            let due = conn.last_used + inner.idle;
            if conn.in_flight > 0 {
                now + inner.idle
            } else if due > now {
                due
            } else {
                conn.connection = None;
                tracing::debug!(driver = %inner.driver, idle = ?inner.idle, "closed the idle connection to the CSI driver");
                crate::runtime::release_memory_soon();
                return;
            }
        };
        tokio::time::sleep_until(wake).await;
    }
}

impl CsiClient {
    /// A client for `driver` at `endpoint` that records its RPCs in `telemetry` and closes its
    /// connection after `idle` without RPCs. Connects lazily, reconnects on the next RPC.
    pub fn new(
        driver: &str,
        endpoint: &str,
        telemetry: Telemetry,
        idle: Duration,
    ) -> Result<CsiClient> {
        let socket = socket_path(endpoint)?;
        Ok(CsiClient {
            inner: Arc::new(Inner {
                driver: driver.to_string(),
                socket,
                idle,
                conn: Mutex::new(Conn {
                    connection: None,
                    in_flight: 0,
                    last_used: Instant::now(),
                }),
                connections: Arc::new(AtomicU64::new(0)),
                caps: Mutex::new(None),
                metrics: telemetry.csi_recorder(driver),
            }),
            migrated: false,
        })
    }

    /// The same client, its RPCs labelled as made for a volume migrated from an in-tree plugin.
    pub fn migrated(&self, migrated: bool) -> CsiClient {
        CsiClient {
            inner: self.inner.clone(),
            migrated,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.inner.socket
    }

    /// Runs one RPC against the deadline. A transport failure on an already open connection
    /// (driver restarted, stale connection) is retried once: CSI node RPCs are idempotent.
    /// Every attempt is one observation in `csi_operations_seconds` and one debug record; the
    /// request and the response (redacted) are trace records.
    async fn call<Req, T, F, Fut>(
        &self,
        method: &'static str,
        volume_id: &str,
        req: &Req,
        deadline: Instant,
        rpc: F,
    ) -> Result<T>
    where
        Req: std::fmt::Debug,
        T: std::fmt::Debug,
        F: Fn(NodeClient<Connection>, std::time::Duration) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let short = short_name(method);
        let driver = self.inner.driver.as_str();
        tracing::trace!(driver, method, volume = volume_id, request = ?req, "CSI request");
        // The first attempt's transport failure, once retried.
        let mut broke: Option<Status> = None;
        loop {
            let start = Instant::now();
            let remaining = deadline.saturating_duration_since(start);
            if remaining.is_zero() {
                self.record(method, volume_id, NON_GRPC, start);
                return Err(self.timeout(short));
            }
            let (connection, lease) = Lease::take(&self.inner);
            let result =
                tokio::time::timeout_at(deadline, rpc(NodeClient::new(connection), remaining))
                    .await;
            drop(lease);
            match result {
                Err(_) => {
                    self.record(method, volume_id, code_name(Code::DeadlineExceeded), start);
                    return Err(self.timeout(short));
                }
                Ok(Ok(resp)) => {
                    self.record(method, volume_id, code_name(Code::Ok), start);
                    let resp = resp.into_inner();
                    tracing::trace!(driver, method, volume = volume_id, response = ?resp, "CSI response");
                    return Ok(resp);
                }
                Ok(Err(status)) => {
                    self.record(method, volume_id, code_name(status.code()), start);
                    let transport = std::error::Error::source(&status).is_some();
                    let never_connected = is_connect_failure(&status);
                    if transport && !never_connected && broke.is_none() {
                        // A pooled connection the driver closed (it restarted since): once more
                        // on a new one, as grpc-go reconnects.
                        tracing::debug!(driver, method, "retrying after transport error: {status}");
                        broke = Some(status);
                        continue;
                    }
                    // The driver went away under the call and is not back: report the break,
                    // as grpc-go does, not the failed re-dial.
                    let status = match broke {
                        Some(first) if never_connected => first,
                        _ => status,
                    };
                    let err = self.status_error(short, &status);
                    tracing::trace!(driver, method, volume = volume_id, error = %err.message(), "CSI error");
                    return Err(err);
                }
            }
        }
    }

    fn record(&self, method: &'static str, volume_id: &str, code: &'static str, start: Instant) {
        let took = start.elapsed();
        let driver = self.inner.driver.as_str();
        self.inner
            .metrics
            .observe(method, code, self.migrated, took);
        tracing::debug!(driver, method, volume = volume_id, code, duration = ?took, "CSI call");
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
        .with_upstream_message(
            "rpc error: code = DeadlineExceeded desc = context deadline exceeded",
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
            // Worded as grpc-go words it, the OS cause last.
            let detail = match connect_failure(status) {
                Some(dial) => format!(
                    "rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: {dial}\""
                ),
                None if connection_closed(status) => {
                    "rpc error: code = Unavailable desc = error reading from server: EOF"
                        .to_string()
                }
                None => format!(
                    "rpc error: code = {} desc = {}",
                    code_name(status.code()),
                    source_chain(status)
                ),
            };
            return Error::new(ErrorKind::Unavailable, format!("{what}: {detail}"))
                .with_upstream_message(detail);
        }
        let kind = if status.code() == Code::DeadlineExceeded {
            ErrorKind::Timeout
        } else {
            ErrorKind::Driver
        };
        let detail = go_status_text(status);
        Error::new(kind, format!("{what}: {detail}"))
            .with_upstream_message(detail)
            .with_grpc_code(status.code() as i32)
    }

    pub async fn node_get_info(&self, deadline: Instant) -> Result<NodeInfo> {
        let resp = self
            .call(
                NODE_GET_INFO,
                "",
                &csi::NodeGetInfoRequest {},
                deadline,
                |mut c, t| async move {
                    c.node_get_info(with_timeout(csi::NodeGetInfoRequest {}, t))
                        .await
                },
            )
            .await?;
        Ok(NodeInfo {
            node_id: resp.node_id,
            max_volumes_per_node: resp.max_volumes_per_node,
            topology: resp
                .accessible_topology
                .map(|t| t.segments.into_iter().collect()),
        })
    }

    /// The driver's node capabilities, probed once per connection. A failed probe the driver
    /// may still be answering is uncertain (upstream `nodeGetCapabilities`); the callers whose
    /// upstream counterpart wraps the error in a plain one make it final again.
    pub async fn capabilities(&self, deadline: Instant) -> Result<NodeCapabilities> {
        let generation = self.inner.connections.load(Ordering::SeqCst);
        if let Some((seen, caps)) = *self.inner.caps.lock().unwrap_or_else(|p| p.into_inner()) {
            if seen == generation && generation > 0 {
                return Ok(caps);
            }
        }
        let resp = self
            .call(
                NODE_GET_CAPABILITIES,
                "",
                &csi::NodeGetCapabilitiesRequest {},
                deadline,
                |mut c, t| async move {
                    c.node_get_capabilities(with_timeout(csi::NodeGetCapabilitiesRequest {}, t))
                        .await
                },
            )
            .await
            .map_err(mark_in_progress)?;
        let caps = NodeCapabilities::from_response(&resp);
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
        self.call(
            NODE_STAGE_VOLUME,
            &req.volume_id,
            &req,
            deadline,
            |mut c, t| {
                let req = req.clone();
                async move { c.node_stage_volume(with_timeout(req, t)).await }
            },
        )
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
        self.call(
            NODE_UNSTAGE_VOLUME,
            volume_id,
            &req,
            deadline,
            |mut c, t| {
                let req = req.clone();
                async move { c.node_unstage_volume(with_timeout(req, t)).await }
            },
        )
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
        self.call(
            NODE_PUBLISH_VOLUME,
            &req.volume_id,
            &req,
            deadline,
            |mut c, t| {
                let req = req.clone();
                async move { c.node_publish_volume(with_timeout(req, t)).await }
            },
        )
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
        self.call(
            NODE_UNPUBLISH_VOLUME,
            volume_id,
            &req,
            deadline,
            |mut c, t| {
                let req = req.clone();
                async move { c.node_unpublish_volume(with_timeout(req, t)).await }
            },
        )
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
        self.call(
            NODE_GET_VOLUME_STATS,
            volume_id,
            &req,
            deadline,
            |mut c, t| {
                let req = req.clone();
                async move { c.node_get_volume_stats(with_timeout(req, t)).await }
            },
        )
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
            .call(
                NODE_EXPAND_VOLUME,
                &req.volume_id,
                &req,
                deadline,
                |mut c, t| {
                    let req = req.clone();
                    async move { c.node_expand_volume(with_timeout(req, t)).await }
                },
            )
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

/// `/csi.v1.Node/NodeStageVolume` → `NodeStageVolume`, the name kcsi's messages use.
fn short_name(method: &str) -> &str {
    method.rsplit('/').next().unwrap_or(method)
}

fn is_connect_failure(status: &Status) -> bool {
    connect_failure(status).is_some()
}

/// The dial error in the status' source chain, if the connection was never established.
fn connect_failure(status: &Status) -> Option<&ConnectFailed> {
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if let Some(failed) = err.downcast_ref::<ConnectFailed>() {
            return Some(failed);
        }
        source = err.source();
    }
    None
}

/// The driver closed the connection under the call (it exited): the stream ends with a broken
/// pipe or an early EOF, which grpc-go reports as "error reading from server: EOF". A reset is
/// the same event: the kernel resets a Unix socket whose owner died with data unread, here the
/// HTTP/2 window updates and pings kcsi's client sends during a long call and upstream's rarely
/// does, so it is worded as the EOF the kubelet sees with upstream's plugin. hyper may say it
/// first: the call was canceled because the connection closed.
fn connection_closed(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_canceled() || h.is_closed() || h.is_incomplete_message() {
                return true;
            }
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
            );
        }
        source = err.source();
    }
    false
}

/// A transport error and its sources, `a: b: c`, each part once (the useful part, e.g.
/// "connection reset", hides in the sources).
fn source_chain(status: &Status) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = err.source();
    }
    if parts.is_empty() {
        return status.message().to_string();
    }
    parts.join(": ")
}

impl NodeCapabilities {
    /// The capabilities a NodeGetCapabilities answer lists (unknown ones ignored).
    pub fn from_response(resp: &csi::NodeGetCapabilitiesResponse) -> NodeCapabilities {
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
