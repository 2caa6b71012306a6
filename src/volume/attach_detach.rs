//! The attach/detach controller's side of upstream's `csiAttacher` (`csi_attacher.go` Attach,
//! Detach, VolumesAreAttached): VolumeAttachments created and deleted for the external-attacher
//! sidecar, whose ControllerPublish / ControllerUnpublish outcome they carry back.
//!
//! Upstream polls its VolumeAttachment lister with a backoff from 500 ms to 7 s; kcsi waits on
//! its own watch of the VolumeAttachments and answers as soon as the status changes.

use std::time::Duration;

use ::kube::api::{DeleteParams, PostParams};
use ::kube::Api;
use k8s_openapi::api::storage::v1::{
    VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec, VolumeError,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::disk::paths::attachment_name;
use crate::error::{Error, ErrorKind, Result};
use crate::host::Host;
use crate::kube::client::call;
use crate::kube::informer::Waited;
use crate::kube::objects;
use crate::kube::volumeattachment_informer::VolumeAttachmentInformer;
use crate::spec::VolumeSpec;
use crate::volume::plugin::split_volume_name;

/// The controller host's watched VolumeAttachments, or the refusal of `call` on a node host
/// (`refusal`: upstream's message for it).
fn controller<'h>(
    host: &'h Host,
    call: &str,
    refusal: &str,
) -> Result<&'h VolumeAttachmentInformer> {
    host.kube()
        .and_then(|k| k.volume_attachments.as_ref())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::NotSupported,
                format!("{call} on a node host: {refusal}"),
            )
        })
}

fn check_node(node: &str) -> Result<()> {
    if node.is_empty() {
        return Err(Error::invalid("node_name is empty"));
    }
    Ok(())
}

/// A status error the external-attacher recorded: final, its message verbatim, its gRPC code
/// when the API carries one (`errorCode`).
fn volume_error(e: &VolumeError) -> Error {
    let err = Error::new(ErrorKind::Driver, e.message.clone().unwrap_or_default());
    match e.error_code {
        Some(code) => err.with_grpc_code(code),
        None => err,
    }
}

/// The VolumeAttachment `Attach` creates for `spec` on `node`.
fn new_attachment(spec: &VolumeSpec, name: &str, driver: &str, node: &str) -> VolumeAttachment {
    let source = if spec.inline_volume_spec_for_csi_migration {
        // A pod's in-tree inline volume translated to CSI: no PV object exists to name.
        VolumeAttachmentSource {
            inline_volume_spec: spec
                .persistent_volume
                .as_ref()
                .and_then(|pv| pv.spec.clone()),
            ..Default::default()
        }
    } else {
        VolumeAttachmentSource {
            persistent_volume_name: Some(spec.name().to_string()),
            ..Default::default()
        }
    };
    VolumeAttachment {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        spec: VolumeAttachmentSpec {
            attacher: driver.to_string(),
            node_name: node.to_string(),
            source,
        },
        status: None,
    }
}

/// `Attach`: creates the VolumeAttachment `csi-<sha256(handle+driver+node)>` unless the watch
/// already has it (AlreadyExists tolerated), then waits until the external-attacher reports
/// `status.attached` (its name returned) or `status.attachError` (final), or `timeout` passes
/// (transient, upstream's message).
pub async fn attach(
    host: &Host,
    spec: &VolumeSpec,
    node: &str,
    timeout: Duration,
) -> Result<String> {
    let vas = controller(
        host,
        "kcsi_attacher_attach",
        "attaching volumes from the kubelet is not supported",
    )?;
    check_node(node)?;
    let src = spec.persistent_source().map_err(|e| {
        e.context(csi_log!(
            "attacher.Attach failed to get CSIPersistentVolumeSource"
        ))
    })?;
    let (driver, handle) = (&src.driver, &src.volume_handle);
    let name = attachment_name(handle, driver, node);
    let kube = host.kube().expect("a controller host has a kubeconfig");
    if !vas.is_synced() || vas.cached(&name).is_none() {
        let api: Api<VolumeAttachment> = Api::all(kube.api.client.clone());
        let va = new_attachment(spec, &name, driver, node);
        match call(timeout, &format!("create VolumeAttachment {name}"), api.create(&PostParams::default(), &va)).await {
            Ok(_) => tracing::debug!(driver, volume = handle.as_str(), "{}", csi_log!("attachment [{name}] for volume [{handle}] created successfully")),
            Err(e) if e.code == Some(409) => tracing::debug!(driver, volume = handle.as_str(), "{}", csi_log!("attachment [{name}] for volume [{handle}] already exists (will not be recreated)")),
            Err(e) => return Err(Error::from(e).context(csi_log!("attacher.Attach failed"))),
        }
    }
    let waited = vas
        .wait_until(&name, timeout, |va| {
            // Not in the watch yet: it was just created.
            let va = va?;
            if va.metadata.deletion_timestamp.is_some() {
                return Some(Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    "volume attachment is being deleted",
                )));
            }
            let status = va.status.as_ref()?;
            if status.attached {
                return Some(Ok(()));
            }
            status.attach_error.as_ref().map(|e| Err(volume_error(e)))
        })
        .await;
    match waited {
        Waited::Done(Ok(())) => {
            tracing::debug!(driver, volume = handle.as_str(), "{}", csi_log!("attacher.Attach finished OK with VolumeAttachment object [{name}]"));
            Ok(name)
        }
        Waited::Done(Err(e)) => Err(e),
        Waited::TimedOut => Err(Error::new(
            ErrorKind::Timeout,
            format!("timed out waiting for external-attacher of {driver} CSI driver to attach volume {handle}"),
        )
        .transient()),
    }
}

/// `Detach`: deletes the VolumeAttachment of `driver^handle` on `node` and waits until it is
/// gone (the external-attacher removes its finalizer after ControllerUnpublish);
/// `status.detachError` is final, an attachment absent at the start is done.
pub async fn detach(host: &Host, volume_name: &str, node: &str, timeout: Duration) -> Result<()> {
    let vas = controller(
        host,
        "kcsi_attacher_detach",
        "detaching volumes from the kubelet is not supported",
    )?;
    let (driver, handle) = split_volume_name(volume_name)?;
    check_node(node)?;
    let name = attachment_name(handle, driver, node);
    let kube = host.kube().expect("a controller host has a kubeconfig");
    let api: Api<VolumeAttachment> = Api::all(kube.api.client.clone());
    match call(
        timeout,
        &format!("delete VolumeAttachment {name}"),
        api.delete(&name, &DeleteParams::default()),
    )
    .await
    {
        Ok(_) => tracing::debug!(
            driver,
            volume = handle,
            "{}",
            csi_log!("detacher deleted ok VolumeAttachment.ID={name}")
        ),
        Err(e) if e.is_not_found() => {
            tracing::debug!(driver, volume = handle, "{}", csi_log!("VolumeAttachment object [{name}] for volume [{handle}] not found, object deleted"));
            return Ok(());
        }
        Err(e) => {
            return Err(Error::from(e).context(csi_log!(
                "detacher.Detach failed to delete VolumeAttachment [{name}]"
            )))
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    // `seen`: the watch had the attachment, so its absence now means deleted. `confirmed`: the
    // watch did not have it but the API server did (created just before the delete), so only
    // the watch's delete event ends the wait.
    let (mut seen, mut confirmed) = (false, false);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let waited = vas
            .wait_until(&name, left, |va| match va {
                Some(va) => {
                    seen = true;
                    va.status
                        .as_ref()
                        .and_then(|s| s.detach_error.as_ref())
                        .map(|e| Err(volume_error(e)))
                }
                None if seen || !confirmed => Some(Ok(())),
                None => None,
            })
            .await;
        match waited {
            Waited::Done(Ok(())) if seen => return Ok(()),
            Waited::Done(Ok(())) => {}
            Waited::Done(Err(e)) => return Err(e),
            Waited::TimedOut => {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("timed out waiting for external-attacher of {driver} CSI driver to detach volume {handle}"),
                )
                .transient())
            }
        }
        match objects::volume_attachment(&kube.api, left, &name).await {
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(e
                    .context(csi_log!(
                    "detacher.WaitForDetach failed for volume [{handle}] (will continue to try)"
                ))
                    .transient())
            }
            Ok(va) => {
                if let Some(e) = va.status.as_ref().and_then(|s| s.detach_error.as_ref()) {
                    return Err(volume_error(e));
                }
                confirmed = true;
            }
        }
    }
}

/// `VolumesAreAttached`: per spec, whether its VolumeAttachment on `node` says
/// `status.attached`, from the watch (a GET when the watch does not have it, as upstream
/// falls back from its lister). A driver whose CSIDriver says `attachRequired: false` counts
/// as attached; a failed lookup counts as not attached.
pub async fn volumes_are_attached(
    host: &Host,
    specs: &[VolumeSpec],
    node: &str,
) -> Result<Vec<bool>> {
    let vas = controller(
        host,
        "kcsi_attacher_volumes_are_attached",
        "the attach/detach controller's call needs \"role\": \"controller\"",
    )?;
    check_node(node)?;
    let kube = host.kube().expect("a controller host has a kubeconfig");
    let mut out = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let src = spec
            .persistent_source()
            .map_err(|e| e.context(format!("specs_json[{i}]")))?;
        let (driver, handle) = (&src.driver, &src.volume_handle);
        match host.driver_facts(driver) {
            Ok(facts) if !facts.attach_required => {
                out.push(true);
                continue;
            }
            Ok(_) => {}
            Err(e) => tracing::error!(
                driver,
                "{}",
                csi_log!("Failed to check CSIDriver for {driver}: {e}")
            ),
        }
        let name = attachment_name(handle, driver, node);
        if vas.is_synced() {
            if let Some(va) = vas.cached(&name) {
                out.push(va.status.as_ref().is_some_and(|s| s.attached));
                continue;
            }
        }
        let attached =
            match objects::volume_attachment(&kube.api, host.config().timeout, &name).await {
                Ok(va) => va.status.is_some_and(|s| s.attached),
                Err(e) => {
                    tracing::error!(
                        driver,
                        volume = handle.as_str(),
                        "{}",
                        csi_log!("attacher.VolumesAreAttached failed for attach.ID={name}: {e}")
                    );
                    false
                }
            };
        out.push(attached);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrated_inline_volume_attaches_by_spec_not_name() {
        let spec: VolumeSpec = serde_json::from_str(
            r#"{"persistentVolume":{"metadata":{"name":"pv1"},"spec":{"csi":{"driver":"d","volumeHandle":"h"}}}}"#,
        )
        .unwrap();
        let va = new_attachment(&spec, "csi-x", "d", "n");
        assert_eq!(
            va.spec.source.persistent_volume_name.as_deref(),
            Some("pv1")
        );
        assert!(va.spec.source.inline_volume_spec.is_none());
        let inline: VolumeSpec = serde_json::from_str(
            r#"{"persistentVolume":{"metadata":{"name":"pv1"},"spec":{"csi":{"driver":"d","volumeHandle":"h"}}},"inlineVolumeSpecForCSIMigration":true}"#,
        )
        .unwrap();
        let va = new_attachment(&inline, "csi-x", "d", "n");
        assert!(va.spec.source.persistent_volume_name.is_none());
        assert_eq!(
            va.spec
                .source
                .inline_volume_spec
                .unwrap()
                .csi
                .unwrap()
                .volume_handle,
            "h"
        );
    }
}
