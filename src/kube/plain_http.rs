//! The API client's service stack for a plain `http://` API server reached without a proxy: the
//! loopback relay through which the Go binding sends kcsi's requests with its host's client.
//!
//! kube's default stack (`ClientBuilder::try_from`) wraps every connector in TLS, and with no
//! CA in the kubeconfig its TLS configuration reads and parses every root certificate of the
//! system (rustls-platform-verifier's native roots), kept for the client's life: memory and
//! code a kubelet that never speaks TLS to its relay would carry for nothing. This stack has
//! kube's layers in kube's order (base URI, retry, authentication, extra headers) over a plain
//! HTTP/1 connector with kube's connect timeout. It leaves out TLS, kube's tracing spans and
//! the read and write timeouts kube sets on its connections: every kcsi API call has a
//! deadline of its own (`client::call`).

use ::kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use ::kube::Config;
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// kube's own stack type (`ClientBuilder::try_from`'s), so either stack takes the same layers.
pub type Stack = BoxService<http::Request<Body>, http::Response<Box<DynBody>>, BoxError>;

/// The stack for `config`, or `None` when its server is not plain `http://` or it names a
/// proxy (kube's own stack handles those).
pub fn builder(config: &Config) -> Option<Result<ClientBuilder<Stack>, ::kube::Error>> {
    if config.cluster_url.scheme() != Some(&http::uri::Scheme::HTTP) || config.proxy_url.is_some() {
        return None;
    }
    Some(build(config))
}

fn build(config: &Config) -> Result<ClientBuilder<Stack>, ::kube::Error> {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(config.connect_timeout);
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(::kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client)
        .map_response(|res| res.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>))
        .boxed();
    Ok(ClientBuilder::new(
        service,
        config.default_namespace.clone(),
    ))
}
