//! The objects a host program feeds kcsi from informers it already runs (`"csiDriversFromHost"`,
//! `"volumeAttachmentsFromHost"`), instead of kcsi listing and watching them itself.

use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};

use super::Host;
use crate::error::{Error, ErrorKind, Result};
use crate::kube::informer::{Feed, Watched};

/// One fed kind: its config key and the calls that feed it, for errors that name them.
struct Fed {
    key: &'static str,
    apply: &'static str,
    delete: &'static str,
    synced: &'static str,
    /// Only a controller host keeps objects of this kind.
    controller_only: bool,
}

const CSIDRIVERS: Fed = Fed {
    key: "csiDriversFromHost",
    apply: "kcsi_host_csidriver_apply",
    delete: "kcsi_host_csidriver_delete",
    synced: "kcsi_host_csidrivers_synced",
    controller_only: false,
};

const VOLUME_ATTACHMENTS: Fed = Fed {
    key: "volumeAttachmentsFromHost",
    apply: "kcsi_host_volumeattachment_apply",
    delete: "kcsi_host_volumeattachment_delete",
    synced: "kcsi_host_volumeattachments_synced",
    controller_only: true,
};

impl Host {
    /// `feed` of this host, or why `call` cannot feed it.
    fn fed<'a, K: Watched>(
        &self,
        feed: Option<&'a Feed<K>>,
        kind: &Fed,
        call: &str,
    ) -> Result<&'a Feed<K>> {
        feed.ok_or_else(|| {
            let source = if self.kube.is_none() {
                "runs standalone, with no API server".to_string()
            } else if kind.controller_only && !self.config().is_controller() {
                format!("is a node host, which keeps no {} objects", K::kind(&()))
            } else {
                format!("lists and watches the {} objects itself", K::kind(&()))
            };
            Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "{call}: this host {source}; only a host made with \"{}\": true (and a \"kubeconfig\") takes them from its program",
                    kind.key
                ),
            )
        })
    }

    fn apply_fed<K: Watched>(&self, feed: Option<&Feed<K>>, kind: &Fed, object: K) -> Result<()> {
        let feed = self.fed(feed, kind, kind.apply)?;
        if object.meta().name.as_deref().unwrap_or("").is_empty() {
            return Err(Error::invalid(format!(
                "{}: the {} has no metadata.name",
                kind.apply,
                K::kind(&())
            )));
        }
        feed.apply(object);
        Ok(())
    }

    fn delete_fed<K: Watched>(&self, feed: Option<&Feed<K>>, kind: &Fed, name: &str) -> Result<()> {
        if self.fed(feed, kind, kind.delete)?.delete(name) {
            return Ok(());
        }
        Err(Error::not_found(format!(
            "{}: there is no {} {name:?} to delete",
            kind.delete,
            K::kind(&())
        )))
    }

    fn csidriver_feed(&self) -> Option<&Feed<CSIDriver>> {
        self.kube().and_then(|k| k.csidriver_feed.as_ref())
    }

    fn volume_attachment_feed(&self) -> Option<&Feed<VolumeAttachment>> {
        self.kube().and_then(|k| k.volume_attachment_feed.as_ref())
    }

    /// A CSIDriver object the host program's informer added or updated
    /// (`"csiDriversFromHost"` hosts).
    pub fn apply_csidriver(&self, object: CSIDriver) -> Result<()> {
        self.apply_fed(self.csidriver_feed(), &CSIDRIVERS, object)
    }

    /// The CSIDriver `name` deleted from the host program's informer; NOT_FOUND when kcsi
    /// did not have it (nothing changes then).
    pub fn delete_csidriver(&self, name: &str) -> Result<()> {
        self.delete_fed(self.csidriver_feed(), &CSIDRIVERS, name)
    }

    /// The host program's informer has synced (it fed every CSIDriver object it listed):
    /// lookups stop waiting for the first list.
    pub fn csidrivers_synced(&self) -> Result<()> {
        self.fed(self.csidriver_feed(), &CSIDRIVERS, CSIDRIVERS.synced)?
            .synced();
        Ok(())
    }

    /// A VolumeAttachment the host program's informer added or updated
    /// (`"volumeAttachmentsFromHost"` controller hosts): Attach, Detach and VolumesAreAttached
    /// read and wait on what is fed.
    pub fn apply_volume_attachment(&self, object: VolumeAttachment) -> Result<()> {
        self.apply_fed(self.volume_attachment_feed(), &VOLUME_ATTACHMENTS, object)
    }

    /// The VolumeAttachment `name` is gone from the host program's informer; NOT_FOUND when
    /// kcsi did not have it.
    pub fn delete_volume_attachment(&self, name: &str) -> Result<()> {
        self.delete_fed(self.volume_attachment_feed(), &VOLUME_ATTACHMENTS, name)
    }

    /// The host program's VolumeAttachment informer has synced.
    pub fn volume_attachments_synced(&self) -> Result<()> {
        self.fed(
            self.volume_attachment_feed(),
            &VOLUME_ATTACHMENTS,
            VOLUME_ATTACHMENTS.synced,
        )?
        .synced();
        Ok(())
    }
}
