//! The Kubernetes client built from the host's kubeconfig, and the mapping of its failures to
//! kcsi errors that name the object.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ::kube::config::KubeConfigOptions;
use ::kube::Client;

use crate::config::KubeconfigSource;
use crate::error::{Error, ErrorKind, Result};
use crate::telemetry::Telemetry;

/// A client plus the number of HTTP requests it has sent (watch connections included), which
/// the host reports so the cost of a registration can be measured.
#[derive(Clone)]
pub struct ApiClient {
    pub client: Client,
    requests: Arc<AtomicU64>,
}

impl ApiClient {
    /// Connects lazily: no request is sent until the first call. Must run inside the runtime.
    pub fn from_kubeconfig(path: &Path) -> Result<ApiClient> {
        Self::recording(KubeconfigSource::File(path), Telemetry::new())
    }

    /// As [`ApiClient::from_kubeconfig`], from a file or an in-memory document, counting
    /// requests by verb in `telemetry`.
    pub fn recording(source: KubeconfigSource<'_>, telemetry: Telemetry) -> Result<ApiClient> {
        let (what, kubeconfig) = match source {
            KubeconfigSource::File(path) => {
                let what = format!("kubeconfig {}", path.display());
                let kubeconfig = super::kubeconfig::read(path)?;
                (what, kubeconfig)
            }
            KubeconfigSource::Data(text) => {
                let what = "the host config's \"kubeconfigData\"".to_string();
                let kubeconfig = super::kubeconfig::parse(&what, &text.0)?;
                (what, kubeconfig)
            }
        };
        let mut config = ready(::kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &KubeConfigOptions::default(),
        ))
        .ok_or_else(|| Error::internal(format!("loading {what} did not complete synchronously")))?
        .map_err(|e| Error::invalid(format!("cannot use {what}: {e}")))?;
        // kube-rs sends none: name kcsi, so the API server's audit log and metrics attribute
        // its requests (the kubelet's own client says "kubelet/<version>").
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(concat!("kcsi/", env!("CARGO_PKG_VERSION"))),
        ));
        let requests = Arc::new(AtomicU64::new(0));
        let count = tower::util::MapRequestLayer::new(counting(requests.clone(), telemetry));
        let client = super::plain_http::builder(&config)
            .unwrap_or_else(|| ::kube::client::ClientBuilder::try_from(config))
            .map_err(|e| {
                Error::invalid(format!("cannot build a Kubernetes client from {what}: {e}"))
            })?
            .with_layer(&count)
            .build();
        Ok(ApiClient { client, requests })
    }

    pub fn requests_sent(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// A request mapper that only counts.
fn counting<B>(
    counter: Arc<AtomicU64>,
    telemetry: Telemetry,
) -> impl Fn(http::Request<B>) -> http::Request<B> + Clone {
    move |req| {
        counter.fetch_add(1, Ordering::Relaxed);
        telemetry.api_request(verb(req.method(), req.uri()), &resource(req.uri()));
        req
    }
}

/// `<resource>[/<name>[/<subresource>]]` of an API path: what follows `/api/v1/` or
/// `/apis/<group>/<version>/` and a `namespaces/<ns>/` prefix (empty for other paths).
fn object_path(uri: &http::Uri) -> Vec<&str> {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    }
    .unwrap_or_default();
    match rest {
        ["namespaces", _, more @ ..] if !more.is_empty() => more.to_vec(),
        other => other.to_vec(),
    }
}

/// The resource of an API request as the API server's request info names it, with its
/// subresource: `secrets`, `nodes/status`, `serviceaccounts/token`.
fn resource(uri: &http::Uri) -> String {
    match object_path(uri).as_slice() {
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        [resource, ..] => resource.to_string(),
        [] => String::new(),
    }
}

/// The Kubernetes verb of an API request, as the API server's request info names it: a GET
/// of a collection is `list` (or `watch` with `watch=true`), of one object `get`.
fn verb(method: &http::Method, uri: &http::Uri) -> &'static str {
    match *method {
        http::Method::POST => return "create",
        http::Method::PUT => return "update",
        http::Method::PATCH => return "patch",
        http::Method::DELETE => return "delete",
        http::Method::GET => {}
        _ => return "other",
    }
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    if watch {
        return "watch";
    }
    if object_path(uri).len() == 1 {
        "list"
    } else {
        "get"
    }
}

/// Polls a future once. kube 5's `Config::from_custom_kubeconfig` is `async` in signature only
/// (it never awaits), and `Host::new` is synchronous and runs inside the runtime, where
/// blocking on a future is impossible.
fn ready<F: std::future::Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// A failed API call: the kcsi error plus the HTTP status the API server answered, if any.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub error: Error,
    pub code: Option<u16>,
}

impl ApiError {
    pub fn is_not_found(&self) -> bool {
        self.code == Some(404)
    }

    /// 409: someone else changed the object since we read it (optimistic concurrency).
    pub fn is_conflict(&self) -> bool {
        self.code == Some(409)
    }

    /// An error that did not come from the API server (e.g. a topology collision).
    pub fn local(error: Error) -> ApiError {
        ApiError { error, code: None }
    }
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Error {
        e.error
    }
}

/// Runs one API call with a deadline. `action` names it with its object, e.g.
/// `get VolumeAttachment csi-…` or `get Secret ns/name`; messages never carry object
/// contents (a Secret's or token's value cannot leak through them).
pub async fn call<T>(
    timeout: Duration,
    action: &str,
    fut: impl std::future::Future<Output = Result<T, ::kube::Error>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(map_error(action, &e)),
        Err(_) => Err(ApiError {
            error: Error::new(
                ErrorKind::Timeout,
                format!("{action}: no answer from the API server within {timeout:?}"),
            ),
            code: None,
        }),
    }
}

fn map_error(action: &str, err: &::kube::Error) -> ApiError {
    use ::kube::Error as K;
    match err {
        // The API server's own text, as client-go's StatusError prints it and upstream's
        // plugin passes it on into events and node conditions: it names the user, the verb,
        // the resource and (but on a create) the object, e.g. `volumeattachments.storage.k8s.io
        // is forbidden: User "u" cannot create resource "volumeattachments" in API group
        // "storage.k8s.io" at the cluster scope`. Only an answer without one gets `action`.
        K::Api(status) => {
            let kind = if status.code == 404 { ErrorKind::NotFound } else { ErrorKind::Kubernetes };
            let message = if status.message.is_empty() {
                format!("{action}: the API server answered HTTP {} {}", status.code, status.reason)
            } else {
                status.message.clone()
            };
            ApiError { error: Error::new(kind, message), code: Some(status.code) }
        }
        // serde_json's messages may quote values from the document: keep only the position.
        K::SerdeError(e) => ApiError {
            error: Error::new(
                ErrorKind::Kubernetes,
                format!("{action}: cannot decode the API server's answer ({:?} error at line {} column {})", e.classify(), e.line(), e.column()),
            ),
            code: None,
        },
        K::HyperError(_) | K::Service(_) => ApiError {
            error: Error::new(ErrorKind::Unavailable, format!("{action}: API server unreachable: {}", chain(err))),
            code: None,
        },
        _ => ApiError { error: Error::new(ErrorKind::Kubernetes, format!("{action}: {}", chain(err))), code: None },
    }
}

/// An error and its sources, `a: b: c` (transport errors hide the useful part, e.g.
/// "Connection refused", in their sources).
fn chain(err: &dyn std::error::Error) -> String {
    let mut parts = vec![err.to_string()];
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_the_api_servers_request_info() {
        let v = |m: http::Method, uri: &str| verb(&m, &uri.parse().unwrap());
        assert_eq!(
            v(http::Method::GET, "/apis/storage.k8s.io/v1/csidrivers?"),
            "list"
        );
        assert_eq!(
            v(
                http::Method::GET,
                "/apis/storage.k8s.io/v1/csidrivers?watch=true&rv=1"
            ),
            "watch"
        );
        assert_eq!(
            v(http::Method::GET, "/apis/storage.k8s.io/v1/csinodes/n1"),
            "get"
        );
        assert_eq!(
            v(http::Method::GET, "/api/v1/namespaces/default/secrets/s"),
            "get"
        );
        assert_eq!(
            v(http::Method::GET, "/api/v1/namespaces/default/secrets"),
            "list"
        );
        assert_eq!(v(http::Method::GET, "/api/v1/namespaces/default"), "get");
        assert_eq!(
            v(
                http::Method::POST,
                "/api/v1/namespaces/d/serviceaccounts/sa/token"
            ),
            "create"
        );
        assert_eq!(v(http::Method::PATCH, "/api/v1/nodes/n1/status"), "patch");
        let r = |uri: &str| resource(&uri.parse().unwrap());
        assert_eq!(
            r("/api/v1/namespaces/d/serviceaccounts/sa/token"),
            "serviceaccounts/token"
        );
        assert_eq!(r("/api/v1/nodes/n1/status"), "nodes/status");
        assert_eq!(r("/api/v1/namespaces/default/secrets/s"), "secrets");
        assert_eq!(
            r("/apis/storage.k8s.io/v1/csidrivers?watch=true"),
            "csidrivers"
        );
        assert_eq!(r("/api/v1/namespaces/default"), "namespaces");
        assert_eq!(r("/version"), "");
    }
}
