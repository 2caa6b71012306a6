//! Attaching, for a driver whose Controller service has PUBLISH_UNPUBLISH_VOLUME: the plugin
//! makes the external-attacher's calls itself (no API server stands in front of a container
//! runtime, so the core's VolumeAttachment-based attach does not apply): ControllerPublishVolume
//! to this node before the first NodeStage, its publish context carried into NodeStage and
//! NodePublish (the plain spec's `publishContext`, as the core takes it in standalone mode),
//! and ControllerUnpublishVolume after the last NodeUnstage.
//!
//! Crash-safe: the attachment file is written before ControllerPublishVolume (without a
//! context) and again with the context after it, and removed only once
//! ControllerUnpublishVolume succeeded. So a plugin killed anywhere between the steps leaves a
//! file whenever the driver may hold an attachment, and an attachment file with nothing
//! staged or published is detached by the next Unmount or Remove of the volume, or at start.

use std::collections::BTreeMap;

use kcsi::access_mode;
use kcsi::Result;
use serde::{Deserialize, Serialize};

use super::state::Description;
use super::volumes::Plugin;
use crate::driver::{self, Publish};

/// One volume's attachment to this node, as kept on disk.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// The node ID ControllerPublishVolume was called with (NodeGetInfo's).
    pub node_id: String,
    /// ControllerPublishVolume's answer; `None` while the call is under way (or was killed).
    pub publish_context: Option<BTreeMap<String, String>>,
}

impl Plugin {
    /// The volume's publish context: the one kept on disk, else ControllerPublishVolume's
    /// (the attachment saved before and after the call).
    pub(super) async fn attach(&self, d: &Description) -> Result<BTreeMap<String, String>> {
        if let Some(Attachment {
            publish_context: Some(context),
            ..
        }) = self.store.load_attachment(&d.name)?
        {
            return Ok(context);
        }
        let mut a = Attachment {
            node_id: self.side.node_id.clone(),
            publish_context: None,
        };
        self.store.save_attachment(&d.name, &a)?;
        let secrets = self.secrets(d)?;
        let read_only = d.access_mode == "ReadOnlyMany";
        let context = driver::controller_publish(
            &self.side.channel,
            Publish {
                volume_id: &d.volume_handle,
                node_id: &self.side.node_id,
                block: d.block,
                fs_type: d.fs_type.as_deref().unwrap_or(""),
                mount_flags: d.mount_options.clone(),
                access_mode: access_mode(&d.access_mode, &Default::default()),
                read_only,
                volume_context: d.attributes.clone().into_iter().collect(),
                secrets: secrets.controller_publish_volume_secret,
            },
            self.side.timeout,
        )
        .await
        .map_err(|e| e.context(format!("cannot attach volume {} to this node", d.name)))?;
        a.publish_context = Some(context.clone());
        self.store.save_attachment(&d.name, &a)?;
        Ok(context)
    }

    /// ControllerUnpublishVolume when the volume has an attachment on disk (from the node ID
    /// it was attached with), then the attachment's removal.
    pub(super) async fn detach(&self, d: &Description) -> Result<()> {
        let Some(a) = self.store.load_attachment(&d.name)? else {
            return Ok(());
        };
        let secrets = self.secrets(d)?;
        driver::controller_unpublish(
            &self.side.channel,
            &d.volume_handle,
            &a.node_id,
            secrets.controller_unpublish_volume_secret,
            self.side.timeout,
        )
        .await
        .map_err(|e| e.context(format!("cannot detach volume {} from this node", d.name)))?;
        self.store.remove_attachment(&d.name)
    }

    /// At start: detaches every volume a killed plugin left attached with nothing staged or
    /// published; the names of those it detached, and why others could not be.
    pub async fn recover(&self) -> Vec<(String, Result<()>)> {
        let mut out = Vec::new();
        for name in self.store.names().unwrap_or_default() {
            let _lock = self.locks.lock(&self.store.path(&name)).await;
            let Ok(d) = self.described(&name) else {
                continue;
            };
            let left = match self.store.load_attachment(&name) {
                Ok(Some(_)) => true,
                Ok(None) => false,
                Err(e) => {
                    out.push((name, Err(e)));
                    continue;
                }
            };
            let idle =
                || -> Result<bool> { Ok(self.publishes(&d)?.is_empty() && !self.staged(&d)?) };
            match idle() {
                Ok(true) if left => out.push((name, self.detach(&d).await)),
                Ok(_) => {}
                Err(e) => out.push((name, Err(e))),
            }
        }
        out
    }
}
