//! One registration socket's worker: upstream `operation_generator.go
//! GenerateRegisterPluginFunc` (GetInfo, ValidatePlugin, RegisterPlugin,
//! NotifyRegistrationStatus) and `GenerateUnregisterPluginFunc`. Every failure is retried
//! with exponential backoff until registration succeeds or the socket goes away, as upstream's
//! reconciler retries every registration its operation executor failed; the last error stays
//! visible.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

use crate::csi::proto::registration::registration_client::RegistrationClient;
use crate::csi::proto::registration::{InfoRequest, PluginInfo, RegistrationStatus};
use crate::grpcgo::go_status_text;
use crate::node::registration;
use crate::node::NodeAgent;

/// The plugin type this watcher has a handler for (`registerapi.CSIPlugin`).
pub const CSI_PLUGIN: &str = "CSIPlugin";

/// Upstream's GetInfo deadline.
const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// Upstream's `notifyTimeoutDuration`.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a dial keeps trying a socket that refuses connections: the file appears at
/// bind(), a moment before the server listens. (Upstream blocks up to 10 s in gRPC's dial;
/// here a dead socket is left to the retry backoff sooner.)
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// Upstream's `goroutinemap/exponentialbackoff`: 500 ms, doubling, at most 2 min 2 s.
const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(122);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Registering,
    Registered,
    /// Failed; tried again after a pause.
    Retrying,
}

/// What status reports for one socket.
#[derive(Debug)]
pub struct SocketState {
    phase: Phase,
    driver: Option<String>,
    endpoint: Option<String>,
    attempts: u32,
    last_error: Option<String>,
}

impl Default for SocketState {
    fn default() -> Self {
        SocketState {
            phase: Phase::Registering,
            driver: None,
            endpoint: None,
            attempts: 0,
            last_error: None,
        }
    }
}

impl SocketState {
    pub fn status(&self, path: &Path) -> SocketStatus {
        SocketStatus {
            path: path.to_path_buf(),
            state: match self.phase {
                Phase::Registering => "registering",
                Phase::Registered => "registered",
                Phase::Retrying => "retrying",
            },
            driver: self.driver.clone(),
            endpoint: self.endpoint.clone(),
            attempts: self.attempts,
            last_error: self.last_error.clone(),
        }
    }
}

/// One socket's registration, as `kcsi_host_status` reports it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SocketStatus {
    pub path: PathBuf,
    pub state: &'static str,
    pub driver: Option<String>,
    pub endpoint: Option<String>,
    pub attempts: u32,
    pub last_error: Option<String>,
}

fn update(state: &Mutex<SocketState>, f: impl FnOnce(&mut SocketState)) {
    f(&mut state.lock().unwrap_or_else(|p| p.into_inner()));
}

enum Outcome {
    Registered { name: String, generation: u64 },
    Retry(String),
    HostGone,
}

/// Registers the driver behind `socket`, keeps the registration until `stop` fires (the
/// socket is gone or was re-created), then deregisters it.
pub async fn run(
    node: Weak<NodeAgent>,
    socket: PathBuf,
    state: Arc<Mutex<SocketState>>,
    mut stop: oneshot::Receiver<()>,
    previous: Option<JoinHandle<()>>,
) {
    if let Some(previous) = previous {
        let _ = previous.await;
    }
    let mut pause = FIRST_RETRY;
    let mut logged: Option<String> = None;
    loop {
        update(&state, |s| {
            s.phase = Phase::Registering;
            s.attempts += 1;
        });
        let outcome = attempt(&node, &socket, &state).await;
        match outcome {
            Outcome::HostGone => return,
            Outcome::Registered { name, generation } => {
                update(&state, |s| s.phase = Phase::Registered);
                tracing::info!(
                    "plugin watcher: registered CSI driver {name} from {}",
                    socket.display()
                );
                let _ = (&mut stop).await;
                if let Some(node) = node.upgrade() {
                    let _ = registration::deregister_generation(&node, &name, generation).await;
                }
                return;
            }
            Outcome::Retry(message) => {
                // Logged when it changes, not at every retry of a socket that stays broken.
                if logged.as_deref() != Some(&message) {
                    tracing::warn!(
                        "plugin watcher: socket {}: {message}; retrying with backoff",
                        socket.display()
                    );
                    logged = Some(message.clone());
                } else {
                    tracing::debug!(
                        "plugin watcher: socket {}: {message}; retrying in {pause:?}",
                        socket.display()
                    );
                }
                update(&state, |s| {
                    s.phase = Phase::Retrying;
                    s.last_error = Some(message);
                });
                tokio::select! {
                    _ = &mut stop => return,
                    _ = tokio::time::sleep(pause) => {}
                }
                pause = (pause * 2).min(MAX_RETRY);
            }
        }
    }
}

async fn attempt(node: &Weak<NodeAgent>, socket: &Path, state: &Mutex<SocketState>) -> Outcome {
    let at = socket.display();
    let mut client = match dial(socket).await {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Retry(format!(
                "RegisterPlugin error -- dial failed at socket {at}, err: {e}"
            ))
        }
    };
    let info = match get_info(&mut client).await {
        Ok(info) => info,
        Err(e) => {
            return Outcome::Retry(format!(
                "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {at}, err: {e}"
            ))
        }
    };
    let endpoint = if info.endpoint.is_empty() {
        socket.display().to_string()
    } else {
        info.endpoint.clone()
    };
    update(state, |s| {
        s.driver = Some(info.name.clone());
        s.endpoint = Some(endpoint.clone());
    });
    if info.r#type != CSI_PLUGIN {
        let message = format!(
            "RegisterPlugin error -- no handler registered for plugin type: {} at socket {at}",
            info.r#type
        );
        notify(&mut client, socket, false, &message).await;
        return Outcome::Retry(message);
    }
    let Some(node) = node.upgrade() else {
        return Outcome::HostGone;
    };
    let name = info.name.as_str();
    let versions = &info.supported_versions;
    if let Err(e) = registration::validate(&node.host, name, &endpoint, versions) {
        let message = format!("RegisterPlugin error -- plugin validation failed with err: {e}");
        notify(&mut client, socket, false, &message).await;
        return Outcome::Retry(message);
    }
    match registration::register_generation(&node, name, &endpoint, versions, None).await {
        Err(e) => {
            let message =
                format!("RegisterPlugin error -- plugin registration failed with err: {e}");
            notify(&mut client, socket, false, &message).await;
            Outcome::Retry(message)
        }
        Ok((_, generation)) => {
            // Notified after registering, as upstream, so a registrar that hears `true` finds
            // its driver registered.
            if let Err(e) = send_status(&mut client, true, "").await {
                let _ = registration::deregister_generation(&node, name, generation).await;
                return Outcome::Retry(format!(
                    "RegisterPlugin error -- failed to send registration status at socket {at}, err: {e}"
                ));
            }
            Outcome::Registered {
                name: name.to_string(),
                generation,
            }
        }
    }
}

/// A gRPC connection to a registration socket, retrying refused connections for a moment.
async fn dial(socket: &Path) -> Result<RegistrationClient<Channel>, String> {
    let path = socket.to_path_buf();
    let endpoint = Endpoint::from_static("http://localhost");
    let connect = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move {
            let deadline = Instant::now() + DIAL_TIMEOUT;
            loop {
                match UnixStream::connect(&path).await {
                    Ok(stream) => return Ok(TokioIo::new(stream)),
                    Err(e)
                        if e.kind() == std::io::ErrorKind::ConnectionRefused
                            && Instant::now() < deadline =>
                    {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }));
    match tokio::time::timeout(DIAL_TIMEOUT * 2, connect).await {
        Ok(Ok(channel)) => Ok(RegistrationClient::new(channel)),
        Ok(Err(e)) => Err(error_chain(&e)),
        Err(_) => Err(format!("no connection within {:?}", DIAL_TIMEOUT * 2)),
    }
}

async fn get_info(client: &mut RegistrationClient<Channel>) -> Result<PluginInfo, String> {
    // One timer (no grpc-timeout header, whose expiry reads differently), so a server that
    // never answers fails the same way every time.
    let request = tonic::Request::new(InfoRequest {});
    match tokio::time::timeout(GET_INFO_TIMEOUT, client.get_info(request)).await {
        Err(_) => Err(format!("no answer within {GET_INFO_TIMEOUT:?}")),
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(explain(&status)),
    }
}

/// Unimplemented: the socket serves something else (a CSI driver's own socket, say).
/// Internal without a transport cause: the answer did not decode as a PluginInfo.
fn explain(status: &Status) -> String {
    let transport = std::error::Error::source(status).is_some();
    let text = status_text(status);
    match status.code() {
        Code::Unimplemented => {
            format!(
                "{text} (the socket does not serve the pluginregistration.Registration service)"
            )
        }
        Code::Internal if !transport => format!("{text} (the answer is not a PluginInfo)"),
        _ => text,
    }
}

/// `notifyPlugin`: tells the registrar the result. node-driver-registrar exits on `false`
/// while the call is in flight, so a failed delivery of `false` is only logged.
async fn notify(
    client: &mut RegistrationClient<Channel>,
    socket: &Path,
    registered: bool,
    error: &str,
) {
    if let Err(e) = send_status(client, registered, error).await {
        tracing::debug!(
            "plugin watcher: NotifyRegistrationStatus to {} did not complete: {e}",
            socket.display()
        );
    }
}

async fn send_status(
    client: &mut RegistrationClient<Channel>,
    registered: bool,
    error: &str,
) -> Result<(), String> {
    let request = tonic::Request::new(RegistrationStatus {
        plugin_registered: registered,
        error: error.to_string(),
    });
    match tokio::time::timeout(NOTIFY_TIMEOUT, client.notify_registration_status(request)).await {
        Err(_) => Err(format!("no answer within {NOTIFY_TIMEOUT:?}")),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(status_text(&status)),
    }
}

/// A status the peer returned in Go gRPC's form; a local failure (no connection, deadline)
/// as its message and causes.
fn status_text(status: &Status) -> String {
    match std::error::Error::source(status) {
        Some(cause) => chain_onto(status.message().to_string(), Some(cause)),
        None => go_status_text(status),
    }
}

/// An error with its causes, `a: b: c`, skipping causes whose text repeats.
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    chain_onto(err.to_string(), err.source())
}

fn chain_onto(mut text: String, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    while let Some(e) = source {
        let s = e.to_string();
        if !text.contains(&s) {
            text = format!("{text}: {s}");
        }
        source = e.source();
    }
    text
}
