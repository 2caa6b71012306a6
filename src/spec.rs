//! The volume spec a host hands kcsi (upstream `volume.Spec`): a PersistentVolume with a read-only
//! flag, a pod's inline Volume, or a plain CSI description ([`crate::plain_spec`]) that becomes
//! the equivalent PV; and the CSI source extraction rules built on it.

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, CSIVolumeSource, PersistentVolume, Volume,
};
use std::borrow::Cow;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::plain_spec::{PlainExtras, PlainSpec};

/// `{"persistentVolume": <PV>, "readOnly": bool}`, `{"volume": <Volume>}` or
/// `{"csi": <plain spec>, "readOnly": bool}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(try_from = "RawVolumeSpec")]
pub struct VolumeSpec {
    pub persistent_volume: Option<PersistentVolume>,
    pub volume: Option<Volume>,
    pub read_only: bool,
    /// Set by the kubelet for in-tree volumes migrated to CSI; only labels metrics upstream.
    pub migrated: bool,
    /// Upstream `Spec.InlineVolumeSpecForCSIMigration`: the PV was translated from a pod's
    /// in-tree inline volume, so a VolumeAttachment carries its spec, not a PV name.
    pub inline_volume_spec_for_csi_migration: bool,
    /// Secrets and publish context of a plain spec (then `persistent_volume` is its PV).
    pub plain: Option<PlainExtras>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawVolumeSpec {
    #[serde(default)]
    persistent_volume: Option<PersistentVolume>,
    #[serde(default)]
    volume: Option<Volume>,
    #[serde(default)]
    csi: Option<PlainSpec>,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    migrated: bool,
    #[serde(default, rename = "inlineVolumeSpecForCSIMigration")]
    inline_volume_spec_for_csi_migration: bool,
}

/// The message for a spec with a plain `csi` description and another source.
const PLAIN_AND_OTHER: &str =
    "volume.Spec has a \"csi\" description and a volume or persistent volume source";

impl TryFrom<RawVolumeSpec> for VolumeSpec {
    type Error = Error;

    fn try_from(raw: RawVolumeSpec) -> Result<VolumeSpec> {
        let Some(plain) = raw.csi else {
            return Ok(VolumeSpec {
                persistent_volume: raw.persistent_volume,
                volume: raw.volume,
                read_only: raw.read_only,
                migrated: raw.migrated,
                inline_volume_spec_for_csi_migration: raw.inline_volume_spec_for_csi_migration,
                plain: None,
            });
        };
        if raw.persistent_volume.is_some() || raw.volume.is_some() {
            return Err(Error::invalid(PLAIN_AND_OTHER));
        }
        let (pv, read_only, extras) = plain.into_persistent_volume()?;
        Ok(VolumeSpec {
            persistent_volume: Some(pv),
            volume: None,
            read_only: raw.read_only || read_only,
            migrated: raw.migrated,
            inline_volume_spec_for_csi_migration: raw.inline_volume_spec_for_csi_migration,
            plain: Some(extras),
        })
    }
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
    #[serde(borrow, default)]
    csi: Option<CsiHead<'a>>,
    #[serde(default, rename = "readOnly")]
    _read_only: bool,
    #[serde(default, rename = "migrated")]
    _migrated: bool,
    #[serde(default, rename = "inlineVolumeSpecForCSIMigration")]
    _inline_volume_spec_for_csi_migration: bool,
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
        if let Some(csi) = &self.csi {
            if self.volume.is_some() || self.persistent_volume.is_some() {
                return Err(Error::invalid(PLAIN_AND_OTHER));
            }
            return Ok(SourceHead::Persistent {
                driver: &csi.driver,
                volume_handle: &csi.volume_handle,
            });
        }
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
            || self.csi.is_some()
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

    #[test]
    fn plain_spec_is_a_persistent_source_alone() {
        let plain = r#"{"csi":{"driver":"d","volumeHandle":"h","specName":"s"}}"#;
        let spec = spec(plain);
        assert_eq!(spec.name(), "s");
        assert_eq!(spec.persistent_source().unwrap().volume_handle, "h");
        assert!(spec.plain.is_some());
        let head: SpecHead = serde_json::from_str(plain).unwrap();
        assert!(matches!(
            head.source().unwrap(),
            SourceHead::Persistent {
                driver: "d",
                volume_handle: "h"
            }
        ));
        let both =
            r#"{"csi":{"driver":"d","volumeHandle":"h","specName":"s"},"volume":{"name":"v"}}"#;
        let err = serde_json::from_str::<VolumeSpec>(both).unwrap_err();
        assert!(err.to_string().contains("\"csi\""), "{err}");
        let head: SpecHead = serde_json::from_str(both).unwrap();
        assert!(head.source().is_err());
    }
}
