//! One HTTP/2 connection to a driver's Unix socket, dialled on its first RPC, as the gRPC
//! service the generated clients call. Requests go straight to hyper's connection task: tonic's
//! `Channel` puts a `tower::Buffer` worker in front, one more task hand-off on each side of
//! every RPC (caller to worker and back, then to the connection), and its reconnect logic is the
//! client's own here (a closed connection is replaced, see `csi_client.rs`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use http::uri::{Authority, Scheme};
use hyper::body::Incoming;
use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::UnixStream;
use tokio::sync::OnceCell;
use tonic::body::Body;
use tonic::Status;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// HTTP/2 flow-control windows sized for CSI's messages, which are small: the protocol's
/// initial 64 KiB, the smallest window grpc-go's `WithInitialWindowSize` accepts, instead of
/// hyper's bulk-transfer defaults (2 MiB per stream, 5 MiB per connection) that let a driver
/// make kcsi buffer megabytes per connection. A larger message still passes, a window at a time.
const WINDOW: u32 = 65_535;

/// Marks errors that happened before any driver answered, so they are never taken for a
/// status the driver returned.
#[derive(Clone, Debug)]
pub struct ConnectFailed(pub String);

impl std::fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectFailed {}

/// A cheap handle to one connection; clones share it.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

struct Shared {
    socket: PathBuf,
    /// Counts connections made to the socket; a new one may be a new driver process.
    dials: Arc<AtomicU64>,
    sender: OnceCell<Result<SendRequest<Body>, ConnectFailed>>,
}

impl Connection {
    /// A connection to `socket`, dialled by its first RPC; `dials` counts it once it is made.
    pub fn lazy(socket: &Path, dials: Arc<AtomicU64>) -> Connection {
        Connection {
            shared: Arc::new(Shared {
                socket: socket.to_path_buf(),
                dials,
                sender: OnceCell::new(),
            }),
        }
    }

    /// True once the dial failed or the connection closed: the next RPC needs a new one.
    pub fn is_done(&self) -> bool {
        match self.shared.sender.get() {
            None => false,
            Some(Ok(sender)) => sender.is_closed(),
            Some(Err(_)) => true,
        }
    }

    async fn sender(&self) -> Result<SendRequest<Body>, Status> {
        let shared = &self.shared;
        match shared.sender.get_or_init(|| shared.dial()).await {
            Ok(sender) => Ok(sender.clone()),
            Err(failed) => Err(unavailable(failed.clone())),
        }
    }
}

impl Shared {
    async fn dial(&self) -> Result<SendRequest<Body>, ConnectFailed> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|e| ConnectFailed(crate::grpcgo::dial_error(&self.socket, &e)))?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(WINDOW)
            .initial_connection_window_size(WINDOW)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| {
                ConnectFailed(format!(
                    "HTTP/2 handshake on {} failed: {e}",
                    self.socket.display()
                ))
            })?;
        self.dials.fetch_add(1, Ordering::SeqCst);
        let socket = self.socket.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(socket = %socket.display(), "the connection to the CSI driver ended: {e}");
            }
        });
        Ok(sender)
    }
}

/// A connection that could not be made or broke before the driver answered is Unavailable, as
/// grpc-go reports it to upstream (a code `csi_operations_seconds` counts and the kubelet
/// takes for "may still be in progress"); the cause stays the status' source.
fn unavailable(cause: impl std::error::Error + Send + Sync + 'static) -> Status {
    let mut status = Status::unavailable(cause.to_string());
    status.set_source(Arc::new(cause));
    status
}

impl tower::Service<http::Request<Body>> for Connection {
    type Response = http::Response<Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    /// Gives the request the origin gRPC's HTTP/2 mapping needs (`http://localhost`, upstream's
    /// authority; the generated client sets only the path) and sends it on the connection.
    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let mut parts = req.uri().clone().into_parts();
            parts.scheme = Some(Scheme::HTTP);
            parts.authority = Some(Authority::from_static("localhost"));
            *req.uri_mut() = http::Uri::from_parts(parts)?;
            let mut sender = this.sender().await?;
            sender.ready().await.map_err(unavailable)?;
            Ok(sender.send_request(req).await.map_err(unavailable)?)
        })
    }
}
