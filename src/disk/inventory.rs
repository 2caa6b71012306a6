//! What is staged and published under a root: one walk over the layout [`super::paths`]
//! composes, behind `kcsi_list_device_mounts`, `kcsi list` and `kcsi reconstruct`. Beyond
//! upstream (kubernetes/kubernetes#85476: after a restart the kubelet forgets volumes that are
//! staged but no longer published), so a host can find and unstage what no pod uses.
//!
//! ```text
//! staged, filesystem   <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount
//!                      <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/vol_data.json
//! staged, block        <root>/plugins/kubernetes.io/csi/volumeDevices/staging/<spec>
//!                      <root>/plugins/kubernetes.io/csi/volumeDevices/<spec>/data/vol_data.json
//! published            <root>/pods/<uid>/volumes/kubernetes.io~csi/<spec>/mount
//!                      <root>/pods/<uid>/volumes/kubernetes.io~csi/<spec>/vol_data.json
//! ```
//!
//! A staged volume is listed whether or not its `vol_data.json` is still there (a block one by
//! either of its two paths); a published one only with its file. Everything is read through
//! [`super::beneath::Beneath`]: symlinks and entries kcsi did not make are skipped, never followed, and no
//! mounted directory is entered.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::beneath::Entry;
use super::files::{Files, OpenFiles};
use super::mounts::MountTable;
use super::paths::{is_sha256_hex, Layout};
use super::volume_data::{self, keys, VolumeData};
use crate::error::Result;

/// Driver names nest (`example.com/csi/driver`); deeper than this is not a driver dir.
const MAX_DRIVER_DEPTH: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A global mount (MountDevice).
    Filesystem,
    /// A block staging path (the block mapper's SetUpDevice).
    Block,
}

/// A volume's `vol_data.json`: its keys, or why they could not be read.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DataFile {
    /// `<dir>/vol_data.json`, whether or not it exists.
    pub volume_data_file: PathBuf,
    /// `None` when the file is missing or unreadable (see `volume_data_error`).
    pub volume_data: Option<VolumeData>,
    pub volume_data_error: Option<String>,
}

impl DataFile {
    fn load(files: &OpenFiles, dir: &Path) -> DataFile {
        let (volume_data, volume_data_error) = match files.load(dir) {
            Ok(d) => (Some(d), None),
            Err(e) => (None, Some(e.message().to_string())),
        };
        DataFile {
            volume_data_file: dir.join(volume_data::FILE_NAME),
            volume_data,
            volume_data_error,
        }
    }

    /// The directory holding the file.
    pub fn dir(&self) -> &Path {
        self.volume_data_file.parent().unwrap_or(Path::new("/"))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.volume_data.as_ref()?.get(key).map(String::as_str)
    }
}

/// A staged volume (a device mount), as `kcsi_list_device_mounts` reports it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Staged {
    pub kind: Kind,
    /// From the path for filesystem volumes; from `vol_data.json` for block ones.
    pub driver: Option<String>,
    pub volume_handle: Option<String>,
    /// Block only: the volume's spec name.
    pub spec_name: Option<String>,
    /// The path NodeStageVolume was given.
    pub device_mount_path: PathBuf,
    /// Whether something is mounted at the device mount path.
    pub mounted: bool,
    #[serde(flatten)]
    pub data: DataFile,
}

/// A filesystem volume published into a pod.
#[derive(Clone, Debug)]
pub struct Published {
    pub pod_uid: String,
    pub spec_name: String,
    /// The NodePublish target.
    pub mount_path: PathBuf,
    pub mounted: bool,
    pub data: DataFile,
}

/// Everything one walk found.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// Sorted by device mount path.
    pub staged: Vec<Staged>,
    /// Sorted by pod UID, then spec name.
    pub published: Vec<Published>,
}

/// Walks the root of `files` once.
pub fn walk(files: &Files) -> Result<Inventory> {
    let layout = files.layout();
    let w = Walker {
        fs: files.open()?,
        mounts: MountTable::read()?,
        layout,
    };
    let mut staged = Vec::new();
    let plugin_dir = layout.plugin_dir();
    let block_dir = layout.volume_devices_dir();
    for name in w.dirs(&plugin_dir) {
        let dir = plugin_dir.join(&name);
        if dir != block_dir {
            w.driver_dir(&plugin_dir, &dir, 1, &mut staged);
        }
    }
    w.block(&mut staged);
    staged.sort_by(|a, b| a.device_mount_path.cmp(&b.device_mount_path));
    Ok(Inventory {
        staged,
        published: w.published(),
    })
}

struct Walker<'a> {
    fs: OpenFiles<'a>,
    mounts: MountTable,
    layout: &'a Layout,
}

impl Walker<'_> {
    /// The subdirectories of `dir`, sorted (none when it is missing; symlinks are not
    /// directories here, and mounted ones are not entered).
    fn dirs(&self, dir: &Path) -> Vec<OsString> {
        let mut names = match self.fs.beneath().list(dir) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("{}", csi_log!("skipping {}: {e}", dir.display()));
                return Vec::new();
            }
        };
        names.retain(|n| {
            let path = dir.join(n);
            matches!(self.fs.beneath().entry(&path), Ok(Entry::Dir)) && !self.mounts.contains(&path)
        });
        names.sort();
        names
    }

    fn mounted(&self, path: &Path) -> bool {
        matches!(
            self.fs.beneath().entry(path),
            Ok(Entry::Dir | Entry::File | Entry::Other)
        ) && self.mounts.contains(path)
    }

    /// `<plugin dir>/<driver...>`: its `<sha256(handle)>` dirs are global mounts' dirs.
    fn driver_dir(&self, plugin_dir: &Path, dir: &Path, depth: usize, out: &mut Vec<Staged>) {
        if depth > MAX_DRIVER_DEPTH {
            return;
        }
        for name in self.dirs(dir) {
            let path = dir.join(&name);
            if !name.to_str().is_some_and(is_sha256_hex) {
                self.driver_dir(plugin_dir, &path, depth + 1, out);
                continue;
            }
            let data = DataFile::load(&self.fs, &path);
            let device_mount_path = self.layout.global_mount_in(&path);
            out.push(Staged {
                kind: Kind::Filesystem,
                driver: dir
                    .strip_prefix(plugin_dir)
                    .ok()
                    .map(|d| d.to_string_lossy().into_owned()),
                volume_handle: data.get(keys::VOLUME_HANDLE).map(str::to_string),
                spec_name: None,
                mounted: self.mounted(&device_mount_path),
                device_mount_path,
                data,
            });
        }
    }

    /// Block volumes: every spec with a staging path or a data dir.
    fn block(&self, out: &mut Vec<Staged>) {
        let devices = self.layout.volume_devices_dir();
        let shared = [
            self.layout.block_staging_dir(),
            self.layout.block_publish_root(),
        ];
        let mut specs: BTreeSet<String> = BTreeSet::new();
        for name in self.dirs(&devices) {
            let Some(spec) = name.to_str() else { continue };
            let is_volume = !shared.contains(&devices.join(spec))
                && self
                    .layout
                    .block_data_dir(spec)
                    .is_ok_and(|d| matches!(self.fs.beneath().entry(&d), Ok(Entry::Dir)));
            if is_volume {
                specs.insert(spec.to_string());
            }
        }
        specs.extend(
            self.dirs(&shared[0])
                .into_iter()
                .filter_map(|n| n.into_string().ok()),
        );
        for spec in specs {
            let (Ok(staging), Ok(data_dir)) = (
                self.layout.block_staging_path(&spec),
                self.layout.block_data_dir(&spec),
            ) else {
                continue;
            };
            let data = DataFile::load(&self.fs, &data_dir);
            out.push(Staged {
                kind: Kind::Block,
                driver: data.get(keys::DRIVER_NAME).map(str::to_string),
                volume_handle: data.get(keys::VOLUME_HANDLE).map(str::to_string),
                spec_name: Some(spec),
                mounted: self.mounted(&staging),
                device_mount_path: staging,
                data,
            });
        }
    }

    /// `<root>/pods/<uid>/volumes/kubernetes.io~csi/<spec>` with a `vol_data.json`.
    fn published(&self) -> Vec<Published> {
        let mut out = Vec::new();
        for uid in self.dirs(&self.layout.pods_dir()) {
            let Some(uid) = uid.to_str() else { continue };
            let Ok(volumes) = self.layout.pod_volumes_dir(uid) else {
                continue;
            };
            for spec in self.dirs(&volumes) {
                let Some(spec) = spec.to_str() else { continue };
                let (Ok(dir), Ok(mount_path)) = (
                    self.layout.pod_volume_dir(uid, spec),
                    self.layout.pod_mount_path(uid, spec),
                ) else {
                    continue;
                };
                if matches!(
                    self.fs.beneath().entry(&dir.join(volume_data::FILE_NAME)),
                    Ok(Entry::Missing)
                ) {
                    continue;
                }
                out.push(Published {
                    pod_uid: uid.to_string(),
                    spec_name: spec.to_string(),
                    mounted: self.mounted(&mount_path),
                    mount_path,
                    data: DataFile::load(&self.fs, &dir),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(driver: &str, handle: &str) -> VolumeData {
        [
            (keys::DRIVER_NAME.to_string(), driver.to_string()),
            (keys::VOLUME_HANDLE.to_string(), handle.to_string()),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn walk_finds_staged_volumes_of_nested_drivers_block_ones_and_published_ones() {
        let root = tempfile::tempdir().unwrap();
        let files = Files::without_blanks(root.path());
        let layout = files.layout();
        let fs = files.open().unwrap();
        let dmp = layout
            .device_mount_path("example.com/nested", "vol-1")
            .unwrap();
        fs.make_dirs(&dmp).unwrap();
        fs.save(dmp.parent().unwrap(), &data("example.com/nested", "vol-1"))
            .unwrap();
        // A global mount whose file is gone: listed with the driver from the path.
        let orphan = layout.device_mount_path("d2", "vol-2").unwrap();
        fs.make_dirs(&orphan).unwrap();
        // A block volume by its staging path, another by its data dir only (no STAGE_UNSTAGE).
        let block = layout.block_paths("spec-b", "").unwrap();
        fs.make_dirs(&block.staging_path).unwrap();
        fs.make_dirs(&block.data_dir).unwrap();
        fs.save(&block.data_dir, &data("blk", "vol-3")).unwrap();
        let unstaged = layout.block_data_dir("spec-c").unwrap();
        fs.make_dirs(&unstaged).unwrap();
        fs.save(&unstaged, &data("blk", "vol-4")).unwrap();
        let pod_mount = layout.pod_mount_path("uid-1", "pv1").unwrap();
        fs.make_dirs(&pod_mount).unwrap();
        fs.save(pod_mount.parent().unwrap(), &data("d2", "vol-2"))
            .unwrap();
        // A pod volume dir without its file is not published; symlinks are not followed.
        fs.make_dirs(&layout.pod_mount_path("uid-1", "pv0").unwrap())
            .unwrap();
        std::os::unix::fs::symlink("/", layout.plugin_dir().join("evil")).unwrap();

        let found = walk(&files).unwrap();
        let summary: Vec<_> = found
            .staged
            .iter()
            .map(|m| {
                (
                    m.kind,
                    m.driver.as_deref(),
                    m.volume_handle.as_deref(),
                    m.spec_name.as_deref(),
                    m.mounted,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (Kind::Filesystem, Some("d2"), None, None, false),
                (
                    Kind::Filesystem,
                    Some("example.com/nested"),
                    Some("vol-1"),
                    None,
                    false
                ),
                (
                    Kind::Block,
                    Some("blk"),
                    Some("vol-3"),
                    Some("spec-b"),
                    false
                ),
                (
                    Kind::Block,
                    Some("blk"),
                    Some("vol-4"),
                    Some("spec-c"),
                    false
                ),
            ]
        );
        assert_eq!(found.staged[1].device_mount_path, dmp);
        assert_eq!(found.staged[2].device_mount_path, block.staging_path);
        assert!(found.staged[0]
            .data
            .volume_data_error
            .as_deref()
            .unwrap()
            .contains("No such file"));
        let published: Vec<_> = found
            .published
            .iter()
            .map(|p| (p.pod_uid.as_str(), p.spec_name.as_str(), &p.mount_path))
            .collect();
        assert_eq!(published, vec![("uid-1", "pv1", &pod_mount)]);
        assert_eq!(
            found.published[0].data.get(keys::VOLUME_HANDLE),
            Some("vol-2")
        );
    }

    #[test]
    fn staged_volumes_serialize_as_kcsi_list_device_mounts_reports_them() {
        let root = tempfile::tempdir().unwrap();
        let files = Files::without_blanks(root.path());
        let layout = files.layout();
        let fs = files.open().unwrap();
        let dmp = layout.device_mount_path("d", "h").unwrap();
        fs.make_dirs(&dmp).unwrap();
        let [staged] = walk(&files).unwrap().staged.try_into().unwrap();
        let json = serde_json::to_value(&staged).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "deviceMountPath",
                "driver",
                "kind",
                "mounted",
                "specName",
                "volumeData",
                "volumeDataError",
                "volumeDataFile",
                "volumeHandle"
            ]
        );
        assert_eq!(json["kind"], "filesystem");
        assert_eq!(staged.data.dir(), dmp.parent().unwrap());
    }
}
