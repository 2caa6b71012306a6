//! The device mounts (staged volumes) kcsi finds on disk, with what their `vol_data.json` says
//! — beyond upstream (kubernetes/kubernetes#85476: after a restart the kubelet forgets volumes
//! that are staged but no longer published), so a host can unstage what no pod uses.
//!
//! ```text
//! <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount   filesystem
//! <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/vol_data.json
//! <root>/plugins/kubernetes.io/csi/volumeDevices/staging/<spec>            block
//! <root>/plugins/kubernetes.io/csi/volumeDevices/<spec>/data/vol_data.json
//! ```

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::beneath::{Beneath, Entry};
use super::paths::Layout;
use super::volume_data::{self, keys, VolumeData};
use crate::error::Result;

/// Driver names nest (`example.com/csi/driver`); deeper than this is not a driver dir.
const MAX_DRIVER_DEPTH: usize = 8;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceMount {
    /// "filesystem" (a global mount) or "block" (a block staging path).
    pub kind: &'static str,
    /// From the path for filesystem volumes; from `vol_data.json` for block ones.
    pub driver: Option<String>,
    pub volume_handle: Option<String>,
    /// Block only: the volume's spec name.
    pub spec_name: Option<String>,
    /// The path NodeStageVolume was given.
    pub device_mount_path: PathBuf,
    /// Whether something is mounted at the device mount path.
    pub mounted: bool,
    pub volume_data_file: PathBuf,
    /// The file's keys; `None` when it is missing or unreadable (see `volume_data_error`).
    pub volume_data: Option<VolumeData>,
    pub volume_data_error: Option<String>,
}

impl Layout {
    /// Every global mount dir and block staging path below the plugin dir, sorted by path.
    /// Symlinks and other entries kcsi did not make are skipped, never followed.
    pub fn device_mounts(&self, fs: &Beneath) -> Result<Vec<DeviceMount>> {
        let plugin_dir = self.plugin_dir();
        let mut found = Vec::new();
        for name in fs.list(&plugin_dir)? {
            if name == "volumeDevices" {
                continue;
            }
            scan_driver_dir(fs, &plugin_dir, &plugin_dir.join(name), 1, &mut found);
        }
        let devices = plugin_dir.join("volumeDevices");
        let staging = devices.join("staging");
        for name in list_dirs(fs, &staging) {
            let Some(spec) = name.to_str() else { continue };
            let data_dir = devices.join(spec).join("data");
            let mut m = describe(fs, "block", staging.join(spec), data_dir);
            m.spec_name = Some(spec.to_string());
            m.driver = field(&m.volume_data, keys::DRIVER_NAME);
            found.push(m);
        }
        found.sort_by(|a, b| a.device_mount_path.cmp(&b.device_mount_path));
        Ok(found)
    }
}

/// Walks `<plugin dir>/<driver...>` looking for `<sha256>` dirs (64 hex digits).
fn scan_driver_dir(
    fs: &Beneath,
    plugin_dir: &Path,
    dir: &Path,
    depth: usize,
    found: &mut Vec<DeviceMount>,
) {
    if depth > MAX_DRIVER_DEPTH {
        return;
    }
    for name in list_dirs(fs, dir) {
        let path = dir.join(&name);
        let is_hash = name
            .to_str()
            .is_some_and(|n| n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit()));
        if is_hash {
            let mut m = describe(fs, "filesystem", path.join("globalmount"), path.clone());
            m.driver = dir
                .strip_prefix(plugin_dir)
                .ok()
                .map(|d| d.to_string_lossy().into_owned());
            found.push(m);
        } else {
            scan_driver_dir(fs, plugin_dir, &path, depth + 1, found);
        }
    }
}

/// The subdirectories of `dir` (none when it is missing; symlinks are not directories here).
fn list_dirs(fs: &Beneath, dir: &Path) -> Vec<std::ffi::OsString> {
    let names = match fs.list(dir) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("{}", csi_log!("skipping {}: {e}", dir.display()));
            return Vec::new();
        }
    };
    names
        .into_iter()
        .filter(|n| matches!(fs.entry(&dir.join(n)), Ok(Entry::Dir)))
        .collect()
}

fn describe(fs: &Beneath, kind: &'static str, path: PathBuf, data_dir: PathBuf) -> DeviceMount {
    let (volume_data, volume_data_error) = match volume_data::load(fs, &data_dir) {
        Ok(d) => (Some(d), None),
        Err(e) => (None, Some(e.message().to_string())),
    };
    let mounted = matches!(fs.entry(&path), Ok(Entry::Dir | Entry::File | Entry::Other))
        && volume_data::is_mount_point(&path).unwrap_or(false);
    DeviceMount {
        kind,
        driver: None,
        volume_handle: field(&volume_data, keys::VOLUME_HANDLE),
        spec_name: None,
        device_mount_path: path,
        mounted,
        volume_data_file: data_dir.join(volume_data::FILE_NAME),
        volume_data,
        volume_data_error,
    }
}

fn field(data: &Option<VolumeData>, key: &str) -> Option<String> {
    data.as_ref().and_then(|d| d.get(key)).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_mounts_lists_global_mounts_of_nested_drivers_and_block_staging() {
        let root = tempfile::tempdir().unwrap();
        let layout = Layout::new(root.path());
        let fs = layout.beneath().unwrap();
        let dmp = layout
            .device_mount_path("example.com/nested", "vol-1")
            .unwrap();
        volume_data::make_dirs(&fs, &dmp).unwrap();
        let data: VolumeData = [
            (
                keys::DRIVER_NAME.to_string(),
                "example.com/nested".to_string(),
            ),
            (keys::VOLUME_HANDLE.to_string(), "vol-1".to_string()),
        ]
        .into_iter()
        .collect();
        volume_data::save(&fs, dmp.parent().unwrap(), &data).unwrap();
        // A global mount whose file is gone: listed with the driver from the path.
        let orphan = layout.device_mount_path("d2", "vol-2").unwrap();
        volume_data::make_dirs(&fs, &orphan).unwrap();
        let block = layout.block_paths("spec-b", "").unwrap();
        volume_data::make_dirs(&fs, &block.staging_path).unwrap();
        volume_data::make_dirs(&fs, &block.data_dir).unwrap();
        volume_data::save(&fs, &block.data_dir, &data).unwrap();
        // Symlinks are not followed.
        std::os::unix::fs::symlink("/", layout.plugin_dir().join("evil")).unwrap();

        let found = layout.device_mounts(&fs).unwrap();
        let summary: Vec<_> = found
            .iter()
            .map(|m| {
                (
                    m.kind,
                    m.driver.as_deref(),
                    m.volume_handle.as_deref(),
                    m.mounted,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                ("filesystem", Some("d2"), None, false),
                (
                    "filesystem",
                    Some("example.com/nested"),
                    Some("vol-1"),
                    false
                ),
                ("block", Some("example.com/nested"), Some("vol-1"), false),
            ]
        );
        assert_eq!(found[1].device_mount_path, dmp);
        assert!(found[0]
            .volume_data_error
            .as_deref()
            .unwrap()
            .contains("No such file"));
        assert_eq!(found[2].spec_name.as_deref(), Some("spec-b"));
    }
}
