//! What every volume operation (publish, stage, map, expand, stats) starts with: the registered
//! driver, a deadline, the driver's capabilities, and the Kubernetes objects the RPC needs, each
//! failure classified as upstream does.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, Pod, SecretReference};
use tokio::time::Instant;

use crate::config::MAX_TIMEOUT;
use crate::csi::csi_client::{CsiClient, NodeCapabilities};
use crate::csi::driver_store::Driver;
use crate::csi::proto::csi;
use crate::disk::beneath::DirSync;
use crate::disk::paths::attachment_name;
use crate::error::{Error, Result};
use crate::host::Host;
use crate::plain_spec::SecretKind;
use crate::spec::{LifecycleMode, VolumeSpec};

pub struct Operation<'h> {
    pub host: &'h Host,
    pub driver: Arc<Driver>,
    pub deadline: Instant,
    /// The spec is an in-tree volume migrated to CSI; labels the operation's metrics.
    migrated: bool,
}

impl<'h> Operation<'h> {
    /// Starts an operation on `driver_name`. A driver that is not registered is a transient
    /// failure (it may register soon, e.g. after a kubelet restart); `what` prefixes its
    /// message with upstream's per-method wording (e.g. "mounter.SetUpAt failed to get CSI client").
    pub fn start(host: &'h Host, driver_name: &str, what: &str) -> Result<Operation<'h>> {
        Self::start_with_timeout(host, driver_name, what, host.config().timeout)
    }

    pub fn start_with_timeout(
        host: &'h Host,
        driver_name: &str,
        what: &str,
        timeout: Duration,
    ) -> Result<Operation<'h>> {
        let driver = host.driver(driver_name).map_err(|e| e.context(what))?;
        Ok(Operation {
            host,
            driver,
            deadline: Instant::now() + timeout.min(MAX_TIMEOUT),
            migrated: false,
        })
    }

    /// Labels the operation's RPCs as made for a migrated in-tree volume (the spec's flag).
    pub fn migrated(mut self, migrated: bool) -> Self {
        self.migrated = migrated;
        self
    }

    pub fn client(&self) -> CsiClient {
        self.driver.client.migrated(self.migrated)
    }

    pub async fn capabilities(&self) -> Result<NodeCapabilities> {
        self.client().capabilities(self.deadline).await
    }

    /// The VolumeAttachment's `attachmentMetadata` (upstream `getPublishContext`): `None` when
    /// the driver needs no attach; a missing or unreadable attachment is transient. A plain
    /// spec's `publishContext` stands in for the attachment.
    pub async fn publish_context(
        &self,
        spec: &VolumeSpec,
        volume_handle: &str,
    ) -> Result<Option<HashMap<String, String>>> {
        let facts = self
            .host
            .driver_facts(&self.driver.name)
            .map_err(Error::transient)?;
        if !facts.attach_required {
            return Ok(None);
        }
        if let Some(context) = spec.plain.as_ref().and_then(|p| p.publish_context.as_ref()) {
            return Ok(Some(context.clone()));
        }
        let name = attachment_name(
            volume_handle,
            &self.driver.name,
            &self.host.config().node_name,
        );
        let va = self
            .host
            .volume_attachment(&name)
            .await
            .map_err(|e| standalone_hint(self.host, &self.driver.name, e).transient())?;
        let metadata = va
            .status
            .and_then(|s| s.attachment_metadata)
            .unwrap_or_default();
        Ok(Some(metadata.into_iter().collect()))
    }

    /// The Secret a `*SecretRef` names, values as strings; any failure is transient
    /// (`what` names the ref, e.g. "NodePublishSecretRef"). A plain spec brings its own.
    pub async fn secrets(
        &self,
        spec: &VolumeSpec,
        what: &str,
        secret_ref: Option<&SecretReference>,
    ) -> Result<HashMap<String, String>> {
        if let Some(plain) = &spec.plain {
            let kind = SecretKind::from_secret_ref_field(what)
                .ok_or_else(|| Error::internal(format!("no secrets kind for {what}")))?;
            return plain
                .secrets
                .get(kind)
                .map_err(|e| e.context(format!("reading the secrets for {what} failed")));
        }
        let Some(r) = secret_ref else {
            return Ok(HashMap::new());
        };
        let ns = r.namespace.as_deref().unwrap_or("");
        let name = r.name.as_deref().unwrap_or("");
        let data = self.host.secret_data(ns, name).await.map_err(|e| {
            e.context(format!("fetching {what} {ns}/{name} failed"))
                .transient()
        })?;
        Ok(data.into_iter().collect())
    }

    /// NodeStageVolume of `src` at `staging`, for MountDevice and block SetUpDevice alike. The
    /// caller has checked `staging` and cleans up after a final error.
    pub async fn node_stage(
        &self,
        src: &CSIPersistentVolumeSource,
        staging: &Path,
        publish_context: HashMap<String, String>,
        capability: csi::VolumeCapability,
        secrets: HashMap<String, String>,
    ) -> Result<()> {
        let req = csi::NodeStageVolumeRequest {
            volume_id: src.volume_handle.clone(),
            publish_context,
            staging_target_path: staging.display().to_string(),
            volume_capability: Some(capability),
            secrets,
            volume_context: src
                .volume_attributes
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect(),
        };
        self.client().node_stage(req, self.deadline).await
    }
}

/// A standalone host has no VolumeAttachment to read: `err` (a failed read of one for
/// `driver`) gets how to tell kcsi the driver needs none, or how to give it an API server.
pub fn standalone_hint(host: &Host, driver: &str, err: Error) -> Error {
    if host.kube().is_some() {
        return err;
    }
    let hint = format!(
        "{}; if CSI driver {driver} needs no attach, add {{\"metadata\": {{\"name\": \"{driver}\"}}, \"spec\": {{\"attachRequired\": false}}}} to the host config's \"csiDrivers\", otherwise give the host a \"kubeconfig\"",
        err.message(),
    );
    err.with_message(hint)
}

/// Upstream `getPodInfoAttrs`: the five volume_context keys a driver with `podInfoOnMount`
/// gets on NodePublish.
pub fn pod_info_attributes(pod: &Pod, pod_uid: &str, mode: LifecycleMode) -> [(String, String); 5] {
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_default();
    let meta = &pod.metadata;
    [
        (
            "csi.storage.k8s.io/pod.name".into(),
            meta.name.clone().unwrap_or_default(),
        ),
        (
            "csi.storage.k8s.io/pod.namespace".into(),
            meta.namespace.clone().unwrap_or_default(),
        ),
        ("csi.storage.k8s.io/pod.uid".into(), pod_uid.to_string()),
        ("csi.storage.k8s.io/serviceAccount.name".into(), sa),
        (
            "csi.storage.k8s.io/ephemeral".into(),
            (mode == LifecycleMode::Ephemeral).to_string(),
        ),
    ]
}

/// Runs `call` (the driver call a `vol_data.json` was just written for) while `sync`, the
/// directory fsync that makes the file's rename durable, runs on a blocking thread: the file
/// is in place before the driver is called, and durable before the operation returns, without
/// the driver call waiting for the disk. A failed sync after a successful call is uncertain:
/// the driver did its part, kcsi's record of it may not survive a crash.
pub async fn with_dir_sync<T>(
    sync: DirSync,
    call: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let synced = tokio::task::spawn_blocking(move || sync.wait());
    let called = call.await;
    let synced = synced.await.unwrap_or_else(|e| {
        Err(Error::internal(format!(
            "the directory fsync panicked: {e}"
        )))
    });
    match (called, synced) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) => Err(e
            .context(csi_log!("failed to save volume info data"))
            .uncertain()),
        (Err(e), synced) => {
            if let Err(s) = synced {
                tracing::warn!("{}", csi_log!("{s}"));
            }
            Err(e)
        }
    }
}
