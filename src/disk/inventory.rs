//! What is staged and published under a root, found from the `vol_data.json` files the
//! kubelet side leaves (a node agent's view after a restart, and `kcsi list`). Never walks into
//! a mounted volume.

use std::fs;
use std::path::{Path, PathBuf};

use crate::disk::beneath::Beneath;
use crate::disk::paths::{Layout, ESCAPED_PLUGIN_NAME};
use crate::disk::volume_data::{self, VolumeData, FILE_NAME};
use crate::error::Result;

const GLOBAL_MOUNT: &str = "globalmount";
const VOLUME_DEVICES: &str = "volumeDevices";

/// Where a `vol_data.json` was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// `<plugin dir>/<driver>/<sha256(handle)>`: a staged (device-mounted) filesystem volume.
    Staged { mount_path: PathBuf },
    /// `<root>/pods/<uid>/volumes/kubernetes.io~csi/<spec>`: a volume published into a pod.
    Published {
        pod_uid: String,
        spec_name: String,
        mount_path: PathBuf,
    },
    /// `<plugin dir>/volumeDevices/<spec>/data`: a block volume.
    Block { spec_name: String },
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub place: Place,
    /// The directory holding `vol_data.json`.
    pub dir: PathBuf,
    /// The file's content, or why it could not be read.
    pub data: std::result::Result<VolumeData, String>,
    /// Whether the volume's mount path is mounted (block: `None`).
    pub mounted: Option<bool>,
}

fn entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(read) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = read
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    out.sort();
    out
}

fn entry(fs: &Beneath, place: Place, dir: PathBuf, mount_path: Option<&Path>) -> Entry {
    Entry {
        data: volume_data::load(fs, &dir).map_err(|e| e.message().to_string()),
        mounted: mount_path.map(|p| volume_data::is_mount_point(p).unwrap_or(false)),
        place,
        dir,
    }
}

/// Every volume under the layout's root, staged first, then published, then block.
pub fn list(layout: &Layout) -> Result<Vec<Entry>> {
    // Reading goes through the root's no-symlink resolver: a planted link yields an error
    // entry, never a file from outside the root.
    let fs = layout.beneath()?;
    let mut out = Vec::new();
    staged(&fs, &layout.plugin_dir(), true, &mut out);
    for (pod_uid, pod_dir) in entries(&layout.pods_dir()) {
        for (spec_name, dir) in entries(&pod_dir.join("volumes").join(ESCAPED_PLUGIN_NAME)) {
            if !dir.join(FILE_NAME).exists() {
                continue;
            }
            let mount_path = dir.join("mount");
            let place = Place::Published {
                pod_uid: pod_uid.clone(),
                spec_name,
                mount_path: mount_path.clone(),
            };
            out.push(entry(&fs, place, dir, Some(&mount_path)));
        }
    }
    for (spec_name, dir) in entries(&layout.plugin_dir().join(VOLUME_DEVICES)) {
        let data_dir = dir.join("data");
        if data_dir.join(FILE_NAME).exists() {
            out.push(entry(&fs, Place::Block { spec_name }, data_dir, None));
        }
    }
    Ok(out)
}

/// Driver names may nest, so staged volumes are found at any depth below the plugin dir; the
/// mounts themselves and the block tree are never entered.
fn staged(fs: &Beneath, dir: &Path, top: bool, out: &mut Vec<Entry>) {
    if dir.join(FILE_NAME).exists() && dir.join(GLOBAL_MOUNT).exists() {
        let mount_path = dir.join(GLOBAL_MOUNT);
        out.push(entry(
            fs,
            Place::Staged {
                mount_path: mount_path.clone(),
            },
            dir.to_path_buf(),
            Some(&mount_path),
        ));
        return;
    }
    for (name, sub) in entries(dir) {
        if (top && name == VOLUME_DEVICES)
            || name == GLOBAL_MOUNT
            || volume_data::is_mount_point(&sub).unwrap_or(true)
        {
            continue;
        }
        staged(fs, &sub, false, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventory_finds_staged_published_and_block_volumes() {
        let root = std::env::temp_dir().join(format!("kcsi-inventory-{}", std::process::id()));
        let layout = Layout::new(&root);
        let fs = layout.beneath().unwrap();
        let data = VolumeData::from([("driverName".to_string(), "d".to_string())]);
        let staged = layout.device_mount_path("a/b", "h").unwrap();
        let published = layout.pod_mount_path("uid-1", "pv1").unwrap();
        let block = layout.block_data_dir("pv2").unwrap();
        for dir in [&staged, &published, &block] {
            volume_data::make_dirs(&fs, dir).unwrap();
        }
        volume_data::save(&fs, staged.parent().unwrap(), &data).unwrap();
        volume_data::save(&fs, published.parent().unwrap(), &data).unwrap();
        volume_data::save(&fs, &block, &data).unwrap();
        let found = list(&layout).unwrap();
        let places: Vec<&Place> = found.iter().map(|e| &e.place).collect();
        assert_eq!(
            places,
            vec![
                &Place::Staged {
                    mount_path: staged.clone()
                },
                &Place::Published {
                    pod_uid: "uid-1".into(),
                    spec_name: "pv1".into(),
                    mount_path: published.clone()
                },
                &Place::Block {
                    spec_name: "pv2".into()
                },
            ]
        );
        assert!(found
            .iter()
            .all(|e| e.data.as_ref().unwrap()["driverName"] == "d"));
        assert_eq!(found[0].mounted, Some(false));
        fs::remove_dir_all(&root).unwrap();
    }
}
