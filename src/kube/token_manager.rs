//! Service-account tokens for CSI drivers' `tokenRequests`, cached per host as the kubelet's
//! token manager caches them (upstream `pkg/kubelet/token/token_manager.go`): keyed by service
//! account, namespace, audiences, expiration and bound pod; reused until 80 % of the token's
//! TTL or 24 h have passed (each less a jitter of up to 10 s), so a `requiresRepublish` driver
//! costs one TokenRequest per token lifetime, not one per republish. A failed refresh of a
//! token that has not expired yet returns the cached one, as upstream.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::authentication::v1::TokenRequestStatus;
use k8s_openapi::api::core::v1::Pod;

use super::client::ApiClient;
use super::objects;
use crate::error::Result;

/// Upstream `maxTTL`: a token older than this is refreshed whatever its expiration.
const MAX_TTL_SECONDS: i64 = 24 * 3600;
/// Upstream `maxJitter`: spreads the refreshes of tokens issued together.
const MAX_JITTER_SECONDS: f64 = 10.0;

/// Upstream `keyFunc`'s fields: nothing confidential, so it can be logged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    service_account: String,
    namespace: String,
    audiences: Vec<String>,
    expiration_seconds: i64,
    pod_name: String,
    pod_uid: String,
}

#[derive(Clone)]
struct Cached {
    status: TokenRequestStatus,
    /// The TTL the API server granted (the answer's `spec.expirationSeconds`).
    granted_seconds: Option<i64>,
}

impl Cached {
    fn expires_at(&self) -> i64 {
        self.status
            .expiration_timestamp
            .as_ref()
            .map_or(i64::MIN, |t| t.0.as_second())
    }
}

#[derive(Default)]
pub struct TokenManager {
    cache: Mutex<HashMap<Key, Cached>>,
}

fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
        .try_into()
        .unwrap_or(i64::MAX)
}

/// Upstream `requiresRefresh`: older than 24 h, or within 20 % of its TTL of expiring, each
/// moved earlier by `jitter` seconds. A token without a granted TTL is never refreshed early.
fn requires_refresh(expires_at: i64, granted_seconds: Option<i64>, now: i64, jitter: i64) -> bool {
    let Some(ttl) = granted_seconds else {
        return false;
    };
    let issued_at = expires_at.saturating_sub(ttl);
    now > issued_at + MAX_TTL_SECONDS - jitter || now > expires_at - ttl * 20 / 100 - jitter
}

impl TokenManager {
    /// A token for `pod`'s service account with these audiences and expiration: the cached
    /// one while it needs no refresh, else a new TokenRequest.
    pub async fn get(
        &self,
        api: &ApiClient,
        timeout: Duration,
        pod: &Pod,
        audiences: Vec<String>,
        expiration_seconds: i64,
    ) -> Result<TokenRequestStatus> {
        let key = Key {
            service_account: objects::service_account_name(pod).to_string(),
            namespace: objects::namespace(pod).to_string(),
            audiences: audiences.clone(),
            expiration_seconds,
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        let cached = self.lock().get(&key).cloned();
        let jitter = (fastrand::f64() * MAX_JITTER_SECONDS) as i64;
        if let Some(c) = &cached {
            if !requires_refresh(c.expires_at(), c.granted_seconds, now_seconds(), jitter) {
                return Ok(c.status.clone());
            }
        }
        match objects::service_account_token(api, timeout, pod, audiences, expiration_seconds).await
        {
            Ok((status, granted_seconds)) => {
                let mut cache = self.lock();
                // Upstream's periodic cleanup, done on insert: expired tokens go.
                let now = now_seconds();
                cache.retain(|_, c| c.expires_at() >= now);
                cache.insert(
                    key,
                    Cached {
                        status: status.clone(),
                        granted_seconds,
                    },
                );
                Ok(status)
            }
            Err(e) => match cached {
                None => Err(e.context("failed to fetch token")),
                Some(c) if c.expires_at() < now_seconds() => {
                    Err(e.context(format!("token {key:?} expired and refresh failed")))
                }
                Some(c) => {
                    tracing::error!(cache_key = ?key, "Couldn't update token: {e}");
                    Ok(c.status)
                }
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Cached>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_follows_upstreams_80_percent_and_24_hour_rule() {
        let hour = 3600;
        // A 1 h token issued at 0: fresh until 48 min, refreshed after.
        assert!(!requires_refresh(hour, Some(hour), 0, 0));
        assert!(!requires_refresh(hour, Some(hour), 48 * 60, 0));
        assert!(requires_refresh(hour, Some(hour), 48 * 60 + 1, 0));
        // The jitter moves the refresh earlier.
        assert!(requires_refresh(hour, Some(hour), 48 * 60 - 5, 10));
        // A 48 h token is refreshed at 24 h, before its 80 % mark.
        let two_days = 48 * hour;
        assert!(!requires_refresh(two_days, Some(two_days), 24 * hour, 0));
        assert!(requires_refresh(two_days, Some(two_days), 24 * hour + 1, 0));
        // No granted TTL: never refreshed early (upstream logs it and keeps the token).
        assert!(!requires_refresh(hour, None, hour - 1, 0));
    }
}
