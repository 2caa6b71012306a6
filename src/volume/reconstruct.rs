//! Reconstruction after a kubelet restart (upstream `ConstructVolumeSpec`): the spec of a
//! mounted volume, rebuilt from the `vol_data.json` in its pod volume dir.

use std::path::{Component, Path};

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, CSIVolumeSource, PersistentVolume, PersistentVolumeSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::disk::volume_data::{self, keys};
use crate::error::{Error, Result};
use crate::host::Host;
use crate::spec::LifecycleMode;

/// A spec rebuilt from `vol_data.json`, in the form kcsi takes a spec:
/// `{"persistentVolume": <PV>, "readOnly": false}` or `{"volume": <Volume>}`.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum RebuiltSpec {
    Persistent {
        #[serde(rename = "persistentVolume")]
        persistent_volume: Box<PersistentVolume>,
        #[serde(rename = "readOnly")]
        read_only: bool,
    },
    Inline {
        volume: Box<Volume>,
    },
}

/// What ConstructVolumeSpec rebuilds: the spec and the SELinux mount context.
#[derive(Clone, Debug, Serialize)]
pub struct Reconstructed {
    pub spec: RebuiltSpec,
    #[serde(rename = "seLinuxMountContext")]
    pub selinux_mount_context: String,
}

/// `{"spec": <spec as kcsi takes it>, "seLinuxMountContext": "<label>"}` for the volume whose
/// per-volume dir (`.../kubernetes.io~csi/<spec>`) is `dir`. The spec carries only what
/// the file records: driver, handle (PV) and name; the SELinux context only with the gate
/// `SELinuxMountReadWriteOncePod` on, else "".
pub fn construct_volume_spec(host: &Host, volume_name: &str, dir: &Path) -> Result<Reconstructed> {
    check_pod_volume_dir(host, dir)?;
    let load = || -> Result<Reconstructed> {
        let data = host.files().open()?.load(dir)?;
        let spec_name = volume_data::get(&data, keys::SPEC_VOL_ID, dir)?.to_string();
        let driver = volume_data::get(&data, keys::DRIVER_NAME, dir)?.to_string();
        let ephemeral = data.get(keys::LIFECYCLE_MODE).map(String::as_str)
            == Some(LifecycleMode::Ephemeral.as_str());
        let spec = if ephemeral {
            let volume = Volume {
                name: spec_name,
                csi: Some(CSIVolumeSource {
                    driver,
                    ..Default::default()
                }),
                ..Default::default()
            };
            RebuiltSpec::Inline {
                volume: Box::new(volume),
            }
        } else {
            let volume_handle = volume_data::get(&data, keys::VOLUME_HANDLE, dir)?.to_string();
            let pv = PersistentVolume {
                metadata: ObjectMeta {
                    name: Some(spec_name),
                    ..Default::default()
                },
                spec: Some(PersistentVolumeSpec {
                    csi: Some(CSIPersistentVolumeSource {
                        driver,
                        volume_handle,
                        ..Default::default()
                    }),
                    volume_mode: Some("Filesystem".to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            };
            RebuiltSpec::Persistent {
                persistent_volume: Box::new(pv),
                read_only: false,
            }
        };
        let selinux = if host.config().gate("SELinuxMountReadWriteOncePod") {
            data.get(keys::SELINUX_MOUNT_CONTEXT)
                .cloned()
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok(Reconstructed {
            spec,
            selinux_mount_context: selinux,
        })
    };
    load().map_err(|e| {
        e.context(csi_log!(
            "plugin.ConstructVolumeSpec failed loading volume data using [{}] for volume {volume_name:?}",
            dir.display()
        ))
    })
}

/// kcsi only reads volume data inside its own pods dir: `mount_path` must be absolute, free of
/// `.`/`..` components, and below `<root>/pods/`.
fn check_pod_volume_dir(host: &Host, dir: &Path) -> Result<()> {
    let pods = host.layout().pods_dir();
    let plain = dir
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !dir.is_absolute() || !plain || !dir.starts_with(&pods) || dir == pods {
        return Err(Error::invalid(format!(
            "mount path {:?} is not a pod volume dir below {}",
            dir.display().to_string(),
            pods.display()
        )));
    }
    Ok(())
}
