//! A volume described without Kubernetes objects, for hosts that have no PersistentVolume,
//! Secret or VolumeAttachment (container runtimes, the `kcsi` command line):
//! `{"csi": {"driver", "volumeHandle", "specName", ...}}`. It becomes the PersistentVolume the
//! kubelet would have been given, so paths and `vol_data.json` are the same as for that PV; the
//! secrets (inline or from a file) and the publish context travel beside it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::error::{Error, Result};

/// The Kubernetes access modes a PV may name.
const ACCESS_MODES: &[&str] = &[
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];

/// The `"csi"` object of a spec.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PlainSpec {
    pub driver: String,
    pub volume_handle: String,
    /// What the PV's `metadata.name` would be: names the volume's directories.
    pub spec_name: String,
    #[serde(default)]
    pub volume_attributes: BTreeMap<String, String>,
    /// One Kubernetes access mode; the PV default `ReadWriteOnce` when absent.
    #[serde(default)]
    pub access_mode: Option<String>,
    /// `Filesystem` (default) or `Block`.
    #[serde(default)]
    pub volume_mode: Option<String>,
    #[serde(default)]
    pub fs_type: Option<String>,
    #[serde(default)]
    pub mount_options: Vec<String>,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub node_stage_secrets: Option<HashMap<String, String>>,
    #[serde(default)]
    pub node_publish_secrets: Option<HashMap<String, String>>,
    #[serde(default)]
    pub node_expand_secrets: Option<HashMap<String, String>>,
    /// An absolute path to a JSON secrets file (see [`SecretsFile`]), read at each operation.
    #[serde(default)]
    pub secrets_file: Option<String>,
    /// The attachment's `attachmentMetadata`, standing in for the VolumeAttachment of a driver
    /// that needs attach.
    #[serde(default)]
    pub publish_context: Option<HashMap<String, String>>,
}

/// Which secrets an operation sends, named for the CSI call they go with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)]
pub enum SecretKind {
    NodeStage,
    NodePublish,
    NodeExpand,
}

impl SecretKind {
    /// The PV field that would name the Secret (used in messages).
    pub fn secret_ref_field(self) -> &'static str {
        match self {
            SecretKind::NodeStage => "NodeStageSecretRef",
            SecretKind::NodePublish => "NodePublishSecretRef",
            SecretKind::NodeExpand => "NodeExpandSecretRef",
        }
    }

    pub fn from_secret_ref_field(field: &str) -> Option<SecretKind> {
        [
            SecretKind::NodeStage,
            SecretKind::NodePublish,
            SecretKind::NodeExpand,
        ]
        .into_iter()
        .find(|k| k.secret_ref_field() == field)
    }
}

/// Where a plain spec's secrets come from. `Debug` prints keys only.
#[derive(Clone)]
pub enum SpecSecrets {
    Inline {
        node_stage: HashMap<String, String>,
        node_publish: HashMap<String, String>,
        node_expand: HashMap<String, String>,
    },
    File(PathBuf),
}

impl fmt::Debug for SpecSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = |m: &HashMap<String, String>| {
            let mut k: Vec<String> = m.keys().cloned().collect();
            k.sort();
            k
        };
        match self {
            SpecSecrets::Inline {
                node_stage,
                node_publish,
                node_expand,
            } => f
                .debug_struct("Inline")
                .field("node_stage_keys", &keys(node_stage))
                .field("node_publish_keys", &keys(node_publish))
                .field("node_expand_keys", &keys(node_expand))
                .finish(),
            SpecSecrets::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

impl SpecSecrets {
    /// The secrets for `kind`; a file is read now (it stands in for a Secret GET, so a
    /// failure is transient, as a failed GET is).
    pub fn get(&self, kind: SecretKind) -> Result<HashMap<String, String>> {
        match self {
            SpecSecrets::Inline {
                node_stage,
                node_publish,
                node_expand,
            } => Ok(match kind {
                SecretKind::NodeStage => node_stage.clone(),
                SecretKind::NodePublish => node_publish.clone(),
                SecretKind::NodeExpand => node_expand.clone(),
            }),
            SpecSecrets::File(path) => {
                let file = SecretsFile::load(path).map_err(Error::transient)?;
                Ok(match kind {
                    SecretKind::NodeStage => file.node_stage_volume_secret,
                    SecretKind::NodePublish => file.node_publish_volume_secret,
                    SecretKind::NodeExpand => file.node_expand_volume_secret,
                })
            }
        }
    }
}

/// What a plain spec carries beside its PV.
#[derive(Clone, Debug)]
pub struct PlainExtras {
    pub secrets: SpecSecrets,
    pub publish_context: Option<HashMap<String, String>>,
}

/// A secrets file: csi-sanity's `--csi.secrets` keys, as JSON (`{"NodeStageVolumeSecret":
/// {"key": "value"}, ...}`); a missing key is no secrets. Unknown keys are refused, so a typo
/// cannot silently send none.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct SecretsFile {
    #[serde(default)]
    pub create_volume_secret: HashMap<String, String>,
    #[serde(default)]
    pub delete_volume_secret: HashMap<String, String>,
    #[serde(default)]
    pub controller_publish_volume_secret: HashMap<String, String>,
    #[serde(default)]
    pub controller_unpublish_volume_secret: HashMap<String, String>,
    #[serde(default)]
    pub controller_validate_volume_capabilities_secret: HashMap<String, String>,
    #[serde(default)]
    pub controller_expand_volume_secret: HashMap<String, String>,
    #[serde(default)]
    pub node_stage_volume_secret: HashMap<String, String>,
    #[serde(default)]
    pub node_publish_volume_secret: HashMap<String, String>,
    #[serde(default)]
    pub node_expand_volume_secret: HashMap<String, String>,
    #[serde(default)]
    pub create_snapshot_secret: HashMap<String, String>,
    #[serde(default)]
    pub delete_snapshot_secret: HashMap<String, String>,
    #[serde(default)]
    pub list_snapshots_secret: HashMap<String, String>,
}

impl SecretsFile {
    pub fn load(path: &Path) -> Result<SecretsFile> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("cannot read secrets file {}", path.display()), &e))?;
        // serde_json's messages name the line and column, never the values.
        serde_json::from_str(&text).map_err(|e| {
            Error::invalid(format!("secrets file {} is not valid: {e}", path.display()))
        })
    }
}

impl PlainSpec {
    /// The PV the kubelet would have been given, and what travels beside it.
    pub fn into_persistent_volume(self) -> Result<(PersistentVolume, bool, PlainExtras)> {
        let bad = |why: String| Error::invalid(format!("spec \"csi\" is not valid: {why}"));
        for (field, value) in [
            ("driver", &self.driver),
            ("volumeHandle", &self.volume_handle),
            ("specName", &self.spec_name),
        ] {
            if value.is_empty() {
                return Err(bad(format!("{field:?} is required")));
            }
        }
        if let Some(mode) = &self.access_mode {
            if !ACCESS_MODES.contains(&mode.as_str()) {
                return Err(bad(format!(
                    "\"accessMode\" {mode:?} is not one of {}",
                    ACCESS_MODES.join(", ")
                )));
            }
        }
        if let Some(mode) = &self.volume_mode {
            if mode != "Filesystem" && mode != "Block" {
                return Err(bad(format!(
                    "\"volumeMode\" {mode:?} is not Filesystem or Block"
                )));
            }
        }
        let inline = self.node_stage_secrets.is_some()
            || self.node_publish_secrets.is_some()
            || self.node_expand_secrets.is_some();
        let secrets = match self.secrets_file {
            Some(_) if inline => {
                return Err(bad(
                    "give secrets inline (\"node*Secrets\") or in \"secretsFile\", not both".into(),
                ))
            }
            Some(f) if !f.starts_with('/') => {
                return Err(bad(format!(
                    "\"secretsFile\" must be an absolute path, got {f:?}"
                )))
            }
            Some(f) => SpecSecrets::File(PathBuf::from(f)),
            None => SpecSecrets::Inline {
                node_stage: self.node_stage_secrets.unwrap_or_default(),
                node_publish: self.node_publish_secrets.unwrap_or_default(),
                node_expand: self.node_expand_secrets.unwrap_or_default(),
            },
        };
        let pv = PersistentVolume {
            metadata: ObjectMeta {
                name: Some(self.spec_name),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: self.driver,
                    volume_handle: self.volume_handle,
                    fs_type: self.fs_type,
                    read_only: self.read_only.then_some(true),
                    volume_attributes: (!self.volume_attributes.is_empty())
                        .then_some(self.volume_attributes),
                    ..Default::default()
                }),
                access_modes: self.access_mode.map(|m| vec![m]),
                mount_options: (!self.mount_options.is_empty()).then_some(self.mount_options),
                volume_mode: self.volume_mode,
                ..Default::default()
            }),
            ..Default::default()
        };
        let extras = PlainExtras {
            secrets,
            publish_context: self.publish_context,
        };
        Ok((pv, self.read_only, extras))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(json: &str) -> Result<(PersistentVolume, bool, PlainExtras)> {
        serde_json::from_str::<PlainSpec>(json)
            .unwrap()
            .into_persistent_volume()
    }

    #[test]
    fn plain_spec_becomes_the_equivalent_pv() {
        let (pv, ro, extras) = plain(
            r#"{"driver":"d","volumeHandle":"h","specName":"s","volumeMode":"Block",
                "accessMode":"ReadWriteOncePod","mountOptions":["noatime"],"readOnly":true,
                "volumeAttributes":{"a":"b"},"nodeStageSecrets":{"pw":"hunter2"}}"#,
        )
        .unwrap();
        let spec = pv.spec.unwrap();
        let csi = spec.csi.unwrap();
        assert_eq!(pv.metadata.name.as_deref(), Some("s"));
        assert_eq!(
            (csi.driver.as_str(), csi.volume_handle.as_str()),
            ("d", "h")
        );
        assert_eq!(spec.volume_mode.as_deref(), Some("Block"));
        assert_eq!(spec.access_modes.unwrap(), vec!["ReadWriteOncePod"]);
        assert!(ro);
        assert_eq!(
            extras.secrets.get(SecretKind::NodeStage).unwrap()["pw"],
            "hunter2"
        );
        assert!(!format!("{extras:?}").contains("hunter2"));
    }

    #[test]
    fn plain_spec_rejects_missing_names_bad_modes_and_two_secret_sources() {
        let err = |json: &str| plain(json).unwrap_err().message().to_string();
        assert!(err(r#"{"driver":"d","volumeHandle":"","specName":"s"}"#).contains("volumeHandle"));
        assert!(
            err(r#"{"driver":"d","volumeHandle":"h","specName":"s","accessMode":"RWO"}"#)
                .contains("RWO")
        );
        assert!(
            err(r#"{"driver":"d","volumeHandle":"h","specName":"s","volumeMode":"Raw"}"#)
                .contains("Raw")
        );
        assert!(err(
            r#"{"driver":"d","volumeHandle":"h","specName":"s","secretsFile":"/f","nodeStageSecrets":{}}"#
        )
        .contains("not both"));
        assert!(
            err(r#"{"driver":"d","volumeHandle":"h","specName":"s","secretsFile":"rel"}"#)
                .contains("absolute")
        );
    }

    #[test]
    fn secrets_file_uses_csi_sanity_keys_and_refuses_typos() {
        let dir = std::env::temp_dir().join(format!("kcsi-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.json");
        std::fs::write(
            &good,
            r#"{"NodePublishVolumeSecret":{"pw":"x"},"CreateVolumeSecret":{"c":"y"}}"#,
        )
        .unwrap();
        let s = SpecSecrets::File(good);
        assert_eq!(s.get(SecretKind::NodePublish).unwrap()["pw"], "x");
        assert!(s.get(SecretKind::NodeStage).unwrap().is_empty());
        let typo = dir.join("typo.json");
        std::fs::write(&typo, r#"{"NodeStageSecret":{"pw":"x"}}"#).unwrap();
        let e = SpecSecrets::File(typo)
            .get(SecretKind::NodeStage)
            .unwrap_err();
        assert!(
            e.message().contains("NodeStageSecret") && e.is_transient(),
            "{e}"
        );
        let missing = SpecSecrets::File(dir.join("missing.json"))
            .get(SecretKind::NodeStage)
            .unwrap_err();
        assert!(missing.message().contains("No such file"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
