//! The volume spec a host hands kcsi (upstream `volume.Spec`): a PersistentVolume with a read-only
//! flag, or a pod's inline Volume; and the CSI source extraction rules built on it.

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, CSIVolumeSource, PersistentVolume, Volume,
};
use std::borrow::Cow;

use serde::Deserialize;

use crate::error::{Error, Result};

/// `{"persistentVolume": <PV>, "readOnly": bool}` or `{"volume": <Volume>}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VolumeSpec {
    #[serde(default)]
    pub persistent_volume: Option<PersistentVolume>,
    #[serde(default)]
    pub volume: Option<Volume>,
    #[serde(default)]
    pub read_only: bool,
    /// Set by the kubelet for in-tree volumes migrated to CSI; only labels metrics upstream.
    #[serde(default)]
    pub migrated: bool,
}

/// The CSI source of a spec.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    Inline(&'a CSIVolumeSource),
    Persistent(&'a CSIPersistentVolumeSource),
}

/// Upstream `storage.VolumeLifecycleMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifecycleMode {
    Persistent,
    Ephemeral,
}

impl LifecycleMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleMode::Persistent => "Persistent",
            LifecycleMode::Ephemeral => "Ephemeral",
        }
    }
}

impl VolumeSpec {
    /// `Spec.Name()`: the inline volume's name or the PV's name.
    pub fn name(&self) -> &str {
        if let Some(v) = &self.volume {
            return &v.name;
        }
        self.persistent_volume
            .as_ref()
            .and_then(|pv| pv.metadata.name.as_deref())
            .unwrap_or("")
    }

    /// `getSourceFromSpec`.
    pub fn source(&self) -> Result<Source<'_>> {
        if self.volume.is_some() && self.persistent_volume.is_some() {
            return Err(Error::invalid(
                "volume.Spec has both volume and persistent volume sources",
            ));
        }
        if let Some(csi) = self.volume.as_ref().and_then(|v| v.csi.as_ref()) {
            return Ok(Source::Inline(csi));
        }
        if let Some(csi) = self
            .persistent_volume
            .as_ref()
            .and_then(|pv| pv.spec.as_ref())
            .and_then(|s| s.csi.as_ref())
        {
            return Ok(Source::Persistent(csi));
        }
        Err(Error::invalid("volume source not found in volume.Spec"))
    }

    /// `getPVSourceFromSpec`: only PersistentVolume sources.
    pub fn persistent_source(&self) -> Result<&CSIPersistentVolumeSource> {
        match self.source()? {
            Source::Persistent(s) => Ok(s),
            Source::Inline(_) => Err(Error::invalid(
                "unexpected api.CSIVolumeSource found in volume.Spec",
            )),
        }
    }

    /// `CanSupport`: a CSI source in either place.
    pub fn has_csi_source(&self) -> bool {
        self.persistent_volume
            .as_ref()
            .and_then(|pv| pv.spec.as_ref())
            .is_some_and(|s| s.csi.is_some())
            || self.volume.as_ref().is_some_and(|v| v.csi.is_some())
    }

    pub fn driver_name(&self) -> Result<&str> {
        Ok(match self.source()? {
            Source::Inline(s) => &s.driver,
            Source::Persistent(s) => &s.driver,
        })
    }

    pub fn lifecycle_mode(&self) -> Result<LifecycleMode> {
        Ok(match self.source()? {
            Source::Inline(_) => LifecycleMode::Ephemeral,
            Source::Persistent(_) => LifecycleMode::Persistent,
        })
    }

    /// The PV's access modes (empty for inline volumes).
    pub fn access_modes(&self) -> &[String] {
        self.persistent_volume
            .as_ref()
            .and_then(|pv| pv.spec.as_ref())
            .and_then(|s| s.access_modes.as_deref())
            .unwrap_or(&[])
    }

    pub fn mount_options(&self) -> &[String] {
        self.persistent_volume
            .as_ref()
            .and_then(|pv| pv.spec.as_ref())
            .and_then(|s| s.mount_options.as_deref())
            .unwrap_or(&[])
    }

    /// True for `volumeMode: Block` PVs.
    pub fn is_block(&self) -> bool {
        self.persistent_volume
            .as_ref()
            .and_then(|pv| pv.spec.as_ref())
            .and_then(|s| s.volume_mode.as_deref())
            == Some("Block")
    }
}

/// Only what the driver-free plugin queries read, parsed without building the full API objects
/// (a typical PV parses about 5x faster this way; the queries are called per volume per sync).
/// Accepts exactly the documents [`VolumeSpec`] accepts at the top level.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SpecHead<'a> {
    #[serde(borrow, default)]
    persistent_volume: Option<PvHead<'a>>,
    #[serde(borrow, default)]
    volume: Option<InlineHead<'a>>,
    #[serde(default, rename = "readOnly")]
    _read_only: bool,
    #[serde(default, rename = "migrated")]
    _migrated: bool,
}

#[derive(Debug, Default, Deserialize)]
struct PvHead<'a> {
    #[serde(borrow, default)]
    spec: Option<PvSpecHead<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct PvSpecHead<'a> {
    #[serde(borrow, default)]
    csi: Option<CsiHead<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct InlineHead<'a> {
    #[serde(borrow, default)]
    csi: Option<CsiHead<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CsiHead<'a> {
    #[serde(borrow, default)]
    driver: Cow<'a, str>,
    #[serde(borrow, default)]
    volume_handle: Cow<'a, str>,
}

/// The CSI source as the queries see it.
#[derive(Clone, Copy, Debug)]
pub enum SourceHead<'s> {
    Inline {
        driver: &'s str,
    },
    Persistent {
        driver: &'s str,
        volume_handle: &'s str,
    },
}

impl SpecHead<'_> {
    /// `getSourceFromSpec`, with the same rules and messages as [`VolumeSpec::source`].
    pub fn source(&self) -> Result<SourceHead<'_>> {
        if self.volume.is_some() && self.persistent_volume.is_some() {
            return Err(Error::invalid(
                "volume.Spec has both volume and persistent volume sources",
            ));
        }
        if let Some(csi) = self.volume.as_ref().and_then(|v| v.csi.as_ref()) {
            return Ok(SourceHead::Inline {
                driver: &csi.driver,
            });
        }
        if let Some(csi) = self
            .persistent_volume
            .as_ref()
            .and_then(|pv| pv.spec.as_ref())
            .and_then(|s| s.csi.as_ref())
        {
            return Ok(SourceHead::Persistent {
                driver: &csi.driver,
                volume_handle: &csi.volume_handle,
            });
        }
        Err(Error::invalid("volume source not found in volume.Spec"))
    }

    /// `CanSupport`: a CSI source in either place.
    pub fn has_csi_source(&self) -> bool {
        self.persistent_volume
            .as_ref()
            .and_then(|pv| pv.spec.as_ref())
            .is_some_and(|s| s.csi.is_some())
            || self.volume.as_ref().is_some_and(|v| v.csi.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> VolumeSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn source_rules_follow_upstream() {
        let pv = spec(
            r#"{"persistentVolume":{"metadata":{"name":"pv1"},"spec":{"csi":{"driver":"d","volumeHandle":"h"}}}}"#,
        );
        assert!(matches!(pv.source().unwrap(), Source::Persistent(_)));
        assert_eq!(pv.name(), "pv1");
        let inline = spec(r#"{"volume":{"name":"v","csi":{"driver":"d"}}}"#);
        assert_eq!(
            inline.persistent_source().unwrap_err().message(),
            "unexpected api.CSIVolumeSource found in volume.Spec"
        );
        assert_eq!(
            spec("{}").source().unwrap_err().message(),
            "volume source not found in volume.Spec"
        );
        let both =
            spec(r#"{"volume":{"name":"v","csi":{"driver":"d"}},"persistentVolume":{"spec":{}}}"#);
        assert!(both.source().unwrap_err().message().contains("both"));
        assert!(serde_json::from_str::<VolumeSpec>(r#"{"volumes":{}}"#).is_err());
    }
}
