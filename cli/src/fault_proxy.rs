//! A gRPC-transparent HTTP/2 proxy on Unix sockets that sits between kcsi and a CSI driver.
//! It forwards every call untouched and reports each one (method, request, response, status,
//! duration); for the RPCs named in its faults it instead hangs, answers a chosen gRPC error,
//! delays, drops the connection, or kills the driver process while the call is in flight.
//! Hand-written on purpose: no real driver produces these faults on demand.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};

use crate::wire;

/// What a fault does to the call it matches.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The call reaches the driver; its answer is withheld until the caller gives up.
    Hang,
    /// The call reaches the driver, which is SIGKILLed before its answer reaches the caller.
    Kill,
    /// The connection is closed without forwarding the call.
    Drop,
    /// The call is answered with this gRPC status without reaching the driver.
    Error(tonic::Code, String),
    /// The call is forwarded after this delay.
    Delay(Duration),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    pub action: Action,
    /// Short method name, e.g. `NodePublishVolume`.
    pub rpc: String,
    /// Which matching call it fires on, from 1 (`RPC@N`; the first by default).
    pub nth: u32,
}

impl std::str::FromStr for Fault {
    type Err = String;

    /// `hang:RPC`, `kill:RPC`, `drop:RPC`, `error:RPC:CODE[:MESSAGE]`, `delay:RPC:DURATION`;
    /// `RPC@N` fires on the Nth matching call instead of the first.
    fn from_str(s: &str) -> Result<Fault, String> {
        let mut parts = s.splitn(3, ':');
        let action = parts.next().unwrap_or_default();
        let rpc = parts.next().unwrap_or_default();
        let arg = parts.next();
        let (rpc, nth) = match rpc.rsplit_once('@') {
            Some((rpc, n)) => match n.parse::<u32>() {
                Ok(n) if n > 0 => (rpc, n),
                _ => {
                    return Err(format!(
                        "fault {s:?}: {n:?} after @ is not a call number from 1"
                    ))
                }
            },
            None => (rpc, 1),
        };
        let rpc = wire::short_method(rpc).to_string();
        if !wire::METHODS.contains(&rpc.as_str()) {
            return Err(format!(
                "fault {s:?} names no CSI method (expected ACTION:RPC, RPC one of {})",
                wire::METHODS.join(", ")
            ));
        }
        let action = match (action, arg) {
            ("hang", None) => Action::Hang,
            ("kill", None) => Action::Kill,
            ("drop", None) => Action::Drop,
            ("error", Some(arg)) => {
                let (code, message) = arg.split_once(':').unwrap_or((arg, "injected by kcsi's fault proxy"));
                let code = wire::parse_code(code)
                    .filter(|c| *c != tonic::Code::Ok)
                    .ok_or_else(|| format!("fault {s:?}: {code:?} is not a gRPC error code"))?;
                Action::Error(code, message.to_string())
            }
            ("delay", Some(arg)) => Action::Delay(parse_duration(arg).ok_or_else(|| {
                format!("fault {s:?}: {arg:?} is not a duration like 500ms or 2s")
            })?),
            _ => {
                return Err(format!(
                    "fault {s:?} is not one of hang:RPC, kill:RPC, drop:RPC, error:RPC:CODE[:MESSAGE], delay:RPC:DURATION"
                ))
            }
        };
        Ok(Fault { action, rpc, nth })
    }
}

/// `500ms`, `2s`, `1.5s`, `1m`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((text, "s"), |i| text.split_at(i));
    let n: f64 = number.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// One observation, sent as it happens.
#[derive(Clone, Debug)]
pub enum Event {
    Request {
        method: String,
        text: String,
    },
    Response {
        method: String,
        /// The gRPC status, `None` when no answer reached the caller.
        code: Option<i32>,
        message: String,
        text: String,
        elapsed: Duration,
    },
    Fault {
        method: String,
        what: String,
    },
}

struct Ctx {
    upstream: PathBuf,
    faults: Vec<Fault>,
    /// Per fault, how many calls matched its RPC so far.
    matched: Mutex<Vec<u32>>,
    every: bool,
    events: Option<mpsc::UnboundedSender<Event>>,
    calls: AtomicU64,
}

impl Ctx {
    fn emit(&self, event: Event) {
        if let Some(tx) = &self.events {
            let _ = tx.send(event);
        }
    }

    /// The fault for this call, if any: each fires on its Nth matching call, or with
    /// `every` on each from the Nth on.
    fn take(&self, rpc: &str) -> Option<Action> {
        let mut matched = self.matched.lock().unwrap_or_else(|p| p.into_inner());
        let mut hit = None;
        for (i, f) in self.faults.iter().enumerate().filter(|(_, f)| f.rpc == rpc) {
            matched[i] += 1;
            let fires = matched[i] == f.nth || (self.every && matched[i] > f.nth);
            if fires && hit.is_none() {
                hit = Some(i);
            }
        }
        hit.map(|i| self.faults[i].action.clone())
    }
}

pub struct FaultProxy {
    listener: UnixListener,
    ctx: Arc<Ctx>,
}

type Body = BoxBody<Bytes, Infallible>;

impl FaultProxy {
    /// Binds `listen` (replacing a stale socket file) in front of the driver at `upstream`.
    pub fn bind(
        listen: &Path,
        upstream: &Path,
        faults: Vec<Fault>,
        every: bool,
        events: Option<mpsc::UnboundedSender<Event>>,
    ) -> std::io::Result<FaultProxy> {
        if std::fs::symlink_metadata(listen).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        }) {
            std::fs::remove_file(listen)?;
        }
        let listener = UnixListener::bind(listen)?;
        let matched = Mutex::new(vec![0; faults.len()]);
        Ok(FaultProxy {
            listener,
            ctx: Arc::new(Ctx {
                upstream: upstream.to_path_buf(),
                faults,
                matched,
                every,
                events,
                calls: AtomicU64::new(0),
            }),
        })
    }

    /// Serves until the task is dropped.
    pub async fn run(self) {
        loop {
            match self.listener.accept().await {
                Ok((down, _)) => {
                    tokio::spawn(connection(down, self.ctx.clone()));
                }
                Err(e) => {
                    self.ctx.emit(Event::Fault {
                        method: String::new(),
                        what: format!("fault proxy cannot accept: {e}"),
                    });
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// One caller connection, paired with one driver connection: cutting one cuts the other.
async fn connection(down: UnixStream, ctx: Arc<Ctx>) {
    let up = match UnixStream::connect(&ctx.upstream).await {
        Ok(up) => up,
        Err(e) => {
            ctx.emit(Event::Fault {
                method: String::new(),
                what: format!(
                    "driver socket {} refused the connection: {e}",
                    ctx.upstream.display()
                ),
            });
            return;
        }
    };
    let pid = up.peer_cred().ok().and_then(|c| c.pid());
    let Ok((sender, conn)) = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(up),
    )
    .await
    else {
        return;
    };
    let driver_conn = tokio::spawn(conn);
    let cut = Arc::new(Notify::new());
    let service = {
        let cut = cut.clone();
        hyper::service::service_fn(move |req| {
            handle(req, sender.clone(), ctx.clone(), pid, cut.clone())
        })
    };
    let serve = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(down), service);
    tokio::select! {
        _ = serve => {}
        _ = cut.notified() => {}
    }
    driver_conn.abort();
}

/// Reports a call the caller stopped waiting for (its future is dropped unanswered).
struct Unanswered {
    ctx: Arc<Ctx>,
    method: String,
    start: Instant,
    answered: bool,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.answered {
            self.ctx.emit(Event::Response {
                method: self.method.clone(),
                code: None,
                message: "no answer reached the caller".into(),
                text: String::new(),
                elapsed: self.start.elapsed(),
            });
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    ctx: Arc<Ctx>,
    pid: Option<i32>,
    cut: Arc<Notify>,
) -> Result<Response<Body>, Infallible> {
    ctx.calls.fetch_add(1, Ordering::Relaxed);
    let path = req.uri().path().to_string();
    let method = wire::short_method(&path).to_string();
    let mut guard = Unanswered {
        ctx: ctx.clone(),
        method: method.clone(),
        start: Instant::now(),
        answered: false,
    };
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return std::future::pending().await;
    };
    ctx.emit(Event::Request {
        method: method.clone(),
        text: wire::request_text(&path, &body),
    });
    let action = ctx.take(&method);
    let fault = |what: String| {
        ctx.emit(Event::Fault {
            method: method.clone(),
            what,
        })
    };
    match &action {
        Some(Action::Error(code, message)) => {
            fault(format!("answering {code:?} without calling the driver"));
            guard.answered = true;
            ctx.emit(Event::Response {
                method: method.clone(),
                code: Some(*code as i32),
                message: message.clone(),
                text: String::new(),
                elapsed: guard.start.elapsed(),
            });
            return Ok(grpc_error(*code, message));
        }
        Some(Action::Drop) => {
            fault("closing the connection without calling the driver".into());
            cut.notify_one();
            return std::future::pending().await;
        }
        Some(Action::Delay(d)) => {
            fault(format!("delaying the call by {d:?}"));
            tokio::time::sleep(*d).await;
        }
        _ => {}
    }

    let forwarded = Request::from_parts(parts, Full::new(body));
    let resp = match sender.send_request(forwarded).await {
        Ok(resp) => resp,
        Err(e) => {
            fault(format!("the driver connection failed: {e}"));
            cut.notify_one();
            return std::future::pending().await;
        }
    };
    let (rparts, rbody) = resp.into_parts();
    let Ok(collected) = rbody.collect().await else {
        fault("the driver connection failed while answering".into());
        cut.notify_one();
        return std::future::pending().await;
    };
    let trailers = collected.trailers().cloned();
    let data = collected.to_bytes();
    let status_from = |h: Option<&HeaderMap>| {
        h.and_then(|h| h.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<i32>().ok())
    };
    let code = status_from(trailers.as_ref()).or_else(|| status_from(Some(&rparts.headers)));
    let message = trailers
        .as_ref()
        .and_then(|t| t.get("grpc-message"))
        .or_else(|| rparts.headers.get("grpc-message"))
        .and_then(|v| v.to_str().ok())
        .map(|m| {
            percent_encoding::percent_decode_str(m)
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();

    match action {
        Some(Action::Hang) => {
            fault("the driver answered; withholding its answer".into());
            return std::future::pending().await;
        }
        Some(Action::Kill) => {
            match pid {
                // SAFETY: kill(2) on the pid the driver socket's peer credentials named.
                Some(pid) if pid > 0 && unsafe { libc::kill(pid, libc::SIGKILL) } == 0 => {
                    fault(format!(
                        "the driver answered; killed it (pid {pid}) before its answer got through"
                    ))
                }
                Some(pid) => fault(format!(
                    "could not kill the driver (pid {pid}): {}",
                    std::io::Error::last_os_error()
                )),
                None => fault("the driver socket reported no peer pid; cannot kill it".into()),
            }
            cut.notify_one();
            return std::future::pending().await;
        }
        _ => {}
    }

    guard.answered = true;
    ctx.emit(Event::Response {
        method: method.clone(),
        code,
        message,
        text: if code == Some(0) {
            wire::response_text(&path, &data)
        } else {
            String::new()
        },
        elapsed: guard.start.elapsed(),
    });
    let body = if data.is_empty() && trailers.is_none() {
        Empty::new().boxed()
    } else {
        Full::new(data)
            .with_trailers(async move { trailers.map(Ok) })
            .boxed()
    };
    Ok(Response::from_parts(rparts, body))
}

/// A trailers-only gRPC answer.
fn grpc_error(code: tonic::Code, message: &str) -> Response<Body> {
    let encoded =
        percent_encoding::utf8_percent_encode(message, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
    let mut resp = Response::new(Empty::new().boxed());
    let h = resp.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from(code as i32));
    if let Ok(v) = HeaderValue::from_str(&encoded) {
        h.insert("grpc-message", v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_refuse_unknown_methods() {
        let f: Fault = "hang:NodeStageVolume".parse().unwrap();
        assert_eq!(f.action, Action::Hang);
        let f: Fault = "error:/csi.v1.Node/NodePublishVolume:ResourceExhausted:busy"
            .parse()
            .unwrap();
        assert_eq!(f.rpc, "NodePublishVolume");
        assert_eq!(
            f.action,
            Action::Error(tonic::Code::ResourceExhausted, "busy".into())
        );
        let f: Fault = "error:NodeUnpublishVolume@2:NotFound".parse().unwrap();
        assert_eq!((f.rpc.as_str(), f.nth), ("NodeUnpublishVolume", 2));
        assert!("hang:NodeGetInfo@0".parse::<Fault>().is_err());
        let f: Fault = "delay:NodeGetInfo:250ms".parse().unwrap();
        assert_eq!(f.action, Action::Delay(Duration::from_millis(250)));
        assert!("hang:NodeStage".parse::<Fault>().is_err());
        assert!("explode:NodeGetInfo".parse::<Fault>().is_err());
        assert!("error:NodeGetInfo:OK".parse::<Fault>().is_err());
    }
}
