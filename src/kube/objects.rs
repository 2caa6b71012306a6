//! Objects the volume operations read straight from the API server (never a cache, as
//! upstream): VolumeAttachments, Secrets, and service-account tokens (TokenRequest).

use std::collections::BTreeMap;
use std::time::Duration;

use ::kube::api::PostParams;
use ::kube::Api;
use k8s_openapi::api::authentication::v1::{
    BoundObjectReference, TokenRequest, TokenRequestSpec, TokenRequestStatus,
};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::storage::v1::VolumeAttachment;

use super::client::{call, ApiClient};
use crate::error::{Error, Result};

pub async fn volume_attachment(
    api: &ApiClient,
    timeout: Duration,
    name: &str,
) -> Result<VolumeAttachment> {
    let vas: Api<VolumeAttachment> = Api::all(api.client.clone());
    Ok(call(
        timeout,
        &format!("get VolumeAttachment {name}"),
        vas.get(name),
    )
    .await?)
}

/// A Secret's `data`, each value decoded as UTF-8 (upstream converts the bytes to a Go
/// string; a Rust string must be valid UTF-8, so other bytes are refused, naming the key only).
pub async fn secret_data(
    api: &ApiClient,
    timeout: Duration,
    namespace: &str,
    name: &str,
) -> Result<BTreeMap<String, String>> {
    let what = format!("Secret {namespace}/{name}");
    let secrets: Api<Secret> = Api::namespaced(api.client.clone(), namespace);
    let secret = call(timeout, &format!("get {what}"), secrets.get(name)).await?;
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| match String::from_utf8(value.0) {
            Ok(text) => Ok((key, text)),
            Err(_) => Err(Error::invalid(format!(
                "{what}: the value of key {key:?} is not valid UTF-8"
            ))),
        })
        .collect()
}

/// The pod's namespace (`default` when unset).
pub fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// The pod's service account (`default` when unset).
pub fn service_account_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

/// `POST serviceaccounts/<sa>/token` for the pod's service account, bound to the pod so the
/// token dies with it: the token and the TTL the API server granted. The host's
/// [`super::token_manager::TokenManager`] caches them.
pub async fn service_account_token(
    api: &ApiClient,
    timeout: Duration,
    pod: &Pod,
    audiences: Vec<String>,
    expiration_seconds: i64,
) -> Result<(TokenRequestStatus, Option<i64>)> {
    let namespace = namespace(pod);
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let sa = service_account_name(pod);
    let what = format!("token for service account {namespace}/{sa} (pod {namespace}/{pod_name})");
    if pod_name.is_empty() || pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        return Err(Error::invalid(format!(
            "cannot request a {what}: the pod has no name or uid to bind the token to"
        )));
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences),
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod_name.to_string()),
                uid: pod.metadata.uid.clone(),
            }),
        }),
        ..Default::default()
    };
    let sas: Api<ServiceAccount> = Api::namespaced(api.client.clone(), namespace);
    let answer: TokenRequest = call(
        timeout,
        &format!("request {what}"),
        sas.create_subresource("token", sa, &PostParams::default(), &request),
    )
    .await?;
    let granted = answer.spec.as_ref().and_then(|s| s.expiration_seconds);
    let status = answer.status.ok_or_else(|| {
        Error::internal(format!(
            "request {what}: the API server's answer has no status"
        ))
    })?;
    Ok((status, granted))
}
