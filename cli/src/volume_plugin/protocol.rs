//! The Docker volume plugin protocol (moby `docs/extend/plugins_volume.md`): JSON over
//! HTTP/1.1 POSTs to `/Plugin.Activate` and `/VolumeDriver.*`. A failure is HTTP 500 with
//! `{"Err": "<kcsi's message> (kcsi <kind>, class <class>[, gRPC <code>])"}`; bad requests
//! (not POST, no such endpoint, a body that is not the endpoint's JSON) are 4xx with an `Err`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kcsi::Error;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::net::UnixStream;

use super::volumes::Plugin;
use crate::report::class_name;
use crate::wire::code_name;

/// Requests are a name, an ID and a few options: far below this.
const MAX_BODY: usize = 1 << 20;
const CONTENT_TYPE: &str = "application/vnd.docker.plugins.v1.1+json";

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Named {
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Create {
    name: String,
    #[serde(default)]
    opts: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Caller {
    name: String,
    #[serde(default, rename = "ID")]
    id: String,
}

/// A request the protocol cannot take: its status and why.
struct Refused(StatusCode, String);

fn decode<T: DeserializeOwned>(endpoint: &str, body: &[u8]) -> Result<T, Refused> {
    serde_json::from_slice(body).map_err(|e| {
        Refused(
            StatusCode::BAD_REQUEST,
            format!("{endpoint}: the request body is not its JSON: {e}"),
        )
    })
}

/// kcsi's message with its kind, class and gRPC code, as the caller's `Err`.
pub fn err_text(e: &Error) -> String {
    let code = e
        .grpc_code()
        .map(|c| format!(", gRPC {}", code_name(c)))
        .unwrap_or_default();
    format!(
        "{} (kcsi {:?}, class {}{code})",
        e.message(),
        e.kind(),
        class_name(e.class())
    )
}

/// The endpoint's answer, and the volume it was about (for the log line).
async fn dispatch(
    p: &Plugin,
    endpoint: &str,
    body: &[u8],
) -> Result<(Result<Value, Error>, String), Refused> {
    // An empty body (Podman sends none to List) reads as an empty object.
    let body: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        body
    };
    Ok(match endpoint {
        "/Plugin.Activate" => (Ok(json!({"Implements": ["VolumeDriver"]})), String::new()),
        "/VolumeDriver.Capabilities" => (
            Ok(json!({"Capabilities": {"Scope": "local"}})),
            String::new(),
        ),
        "/VolumeDriver.Create" => {
            let r: Create = decode(endpoint, body)?;
            let opts = r.opts.unwrap_or_default();
            (p.create(&r.name, &opts).await.map(|()| json!({})), r.name)
        }
        "/VolumeDriver.Remove" => {
            let r: Named = decode(endpoint, body)?;
            (p.remove(&r.name).await.map(|()| json!({})), r.name)
        }
        "/VolumeDriver.Mount" => {
            let r: Caller = decode(endpoint, body)?;
            let path = p.mount(&r.name, &r.id).await;
            (path.map(|m| json!({"Mountpoint": m})), r.name)
        }
        "/VolumeDriver.Unmount" => {
            let r: Caller = decode(endpoint, body)?;
            (p.unmount(&r.name, &r.id).await.map(|()| json!({})), r.name)
        }
        "/VolumeDriver.Path" => {
            let r: Named = decode(endpoint, body)?;
            (p.path(&r.name).map(|m| json!({"Mountpoint": m})), r.name)
        }
        "/VolumeDriver.Get" => {
            let r: Named = decode(endpoint, body)?;
            (p.get(&r.name).map(|v| json!({"Volume": v})), r.name)
        }
        "/VolumeDriver.List" => (p.list().map(|v| json!({"Volumes": v})), String::new()),
        _ => {
            return Err(Refused(
                StatusCode::NOT_FOUND,
                format!("{endpoint}: no such endpoint of the volume plugin protocol"),
            ))
        }
    })
}

fn reply(status: StatusCode, mut body: Value) -> Response<Full<Bytes>> {
    if body.get("Err").is_none() {
        body["Err"] = json!("");
    }
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(CONTENT_TYPE) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

async fn handle(p: Arc<Plugin>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let start = Instant::now();
    let endpoint = req.uri().path().to_string();
    if req.method() != Method::POST {
        let why = format!("{endpoint}: the volume plugin protocol takes POST only");
        return reply(StatusCode::METHOD_NOT_ALLOWED, json!({"Err": why}));
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let why = format!("{endpoint}: cannot read the request body (at most 1 MiB): {e}");
            return reply(StatusCode::BAD_REQUEST, json!({"Err": why}));
        }
    };
    // The call runs to its end in its own task even when the caller hangs up (Podman gives
    // up after its volume_plugin_timeout): a Mount never stops between stage and publish.
    let task = {
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let _busy = p.busy.read().await;
            dispatch(&p, &endpoint, &body).await
        })
    };
    let (status, body, outcome, volume) = match task.await {
        Ok(Ok((Ok(v), volume))) => (StatusCode::OK, v, "ok".to_string(), volume),
        Ok(Ok((Err(e), volume))) => {
            let text = err_text(&e);
            let line = format!("error: {text}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"Err": text}),
                line,
                volume,
            )
        }
        Ok(Err(Refused(status, why))) => (
            status,
            json!({"Err": why}),
            format!("refused: {why}"),
            String::new(),
        ),
        Err(e) => {
            let why = format!("{endpoint}: internal error: {e}");
            let line = why.clone();
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"Err": why}),
                line,
                String::new(),
            )
        }
    };
    eprintln!(
        "kcsi volume-plugin: {endpoint}{}{}: {outcome} ({:.1} ms)",
        if volume.is_empty() { "" } else { " " },
        volume.escape_debug(),
        start.elapsed().as_secs_f64() * 1e3
    );
    reply(status, body)
}

/// Serves one connection (HTTP/1.1, keep-alive) until the caller closes it.
pub async fn serve(p: Arc<Plugin>, stream: UnixStream) {
    let service = hyper::service::service_fn(move |req| {
        let p = p.clone();
        async move { Ok::<_, Infallible>(handle(p, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}
