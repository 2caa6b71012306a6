//! The kubelet's on-disk layout for CSI volumes, and the checks that keep every name a host
//! passes in from escaping the root directory. Only this module composes kubelet paths.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::names::{check_driver_name, check_name};

/// Upstream's plugin name and its escaped form on disk.
pub const PLUGIN_NAME: &str = "kubernetes.io/csi";
pub const ESCAPED_PLUGIN_NAME: &str = "kubernetes.io~csi";

/// The last component of a filesystem volume's device mount path.
const GLOBAL_MOUNT: &str = "globalmount";

/// Lowercase hex SHA-256 of the concatenated parts.
pub fn sha256_hex(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
    }
    hex::encode(h.finalize())
}

/// Whether `name` is a [`sha256_hex`] digest, as the dir of a global mount is named.
pub fn is_sha256_hex(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// VolumeAttachment name: `csi-` + sha256(handle + driver + node).
pub fn attachment_name(volume_handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&[volume_handle, driver, node]))
}

/// Handle of an ephemeral inline volume: `csi-` + sha256(podUID + specName).
pub fn ephemeral_volume_handle(pod_uid: &str, spec_name: &str) -> String {
    format!("csi-{}", sha256_hex(&[pod_uid, spec_name]))
}

/// `EscapeQualifiedName`: every `/` becomes `~`.
pub fn escape_qualified_name(s: &str) -> String {
    s.replace('/', "~")
}

/// Where everything of one host lives.
#[derive(Clone, Debug)]
pub struct Layout {
    root: PathBuf,
}

/// Where one block volume's files live for one pod (upstream `csiBlockMapper`'s getters).
#[derive(Clone, Debug)]
pub struct BlockPaths {
    pub global_map_path: PathBuf,
    pub volume_dir: PathBuf,
    pub data_dir: PathBuf,
    pub staging_path: PathBuf,
    pub publish_dir: PathBuf,
    /// `None` for an unmapper without a pod (the kubelet's UnmountDevice passes no pod UID).
    pub publish_path: Option<PathBuf>,
    pub pod_device_map_path: Option<PathBuf>,
    /// `<global map path>/<pod UID>`, where the kubelet reads block metrics from.
    pub metrics_path: Option<PathBuf>,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/plugins/kubernetes.io/csi` (not escaped, as upstream's GetPluginDir).
    pub fn plugin_dir(&self) -> PathBuf {
        self.root.join("plugins").join(PLUGIN_NAME)
    }

    /// Every path of one block volume, for one pod (`pod_uid` empty: no pod-side paths).
    pub fn block_paths(&self, spec_name: &str, pod_uid: &str) -> Result<BlockPaths> {
        let global_map_path = self.block_global_map_path(spec_name)?;
        let (publish_path, pod_device_map_path, metrics_path) = if pod_uid.is_empty() {
            (None, None, None)
        } else {
            (
                Some(self.block_publish_path(spec_name, pod_uid)?),
                Some(self.pod_device_map_dir(pod_uid)?),
                Some(global_map_path.join(pod_uid)),
            )
        };
        Ok(BlockPaths {
            volume_dir: self.block_volume_dir(spec_name)?,
            data_dir: self.block_data_dir(spec_name)?,
            staging_path: self.block_staging_path(spec_name)?,
            publish_dir: self.block_publish_dir(spec_name)?,
            global_map_path,
            publish_path,
            pod_device_map_path,
            metrics_path,
        })
    }

    /// `<root>/pods`, below which every pod volume dir lives.
    pub fn pods_dir(&self) -> PathBuf {
        self.root.join("pods")
    }

    pub fn plugins_registry_dir(&self) -> PathBuf {
        self.root.join("plugins_registry")
    }

    /// `<root>/pods/<uid>/volumes/kubernetes.io~csi`, the pod's CSI volume dirs.
    pub fn pod_volumes_dir(&self, pod_uid: &str) -> Result<PathBuf> {
        check_name("pod UID", pod_uid)?;
        Ok(self
            .pods_dir()
            .join(pod_uid)
            .join("volumes")
            .join(ESCAPED_PLUGIN_NAME))
    }

    /// `<root>/pods/<uid>/volumes/kubernetes.io~csi/<escaped spec>`.
    pub fn pod_volume_dir(&self, pod_uid: &str, spec_name: &str) -> Result<PathBuf> {
        let escaped = escape_qualified_name(spec_name);
        check_name("volume spec name", &escaped)?;
        Ok(self.pod_volumes_dir(pod_uid)?.join(escaped))
    }

    /// The pod's mount (NodePublish target) path: `<pod volume dir>/mount`.
    pub fn pod_mount_path(&self, pod_uid: &str, spec_name: &str) -> Result<PathBuf> {
        Ok(self.pod_volume_dir(pod_uid, spec_name)?.join("mount"))
    }

    /// `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`.
    pub fn device_mount_path(&self, driver: &str, volume_handle: &str) -> Result<PathBuf> {
        check_driver_name(driver)?;
        if volume_handle.is_empty() {
            return Err(Error::invalid(
                "makeDeviceMountPath failed, CSIPersistentVolumeSource volume handle is empty",
            ));
        }
        Ok(self
            .plugin_dir()
            .join(driver)
            .join(sha256_hex(&[volume_handle]))
            .join(GLOBAL_MOUNT))
    }

    /// The device mount path below a global mount's `<sha256(handle)>` dir.
    pub fn global_mount_in(&self, volume_dir: &Path) -> PathBuf {
        volume_dir.join(GLOBAL_MOUNT)
    }

    /// `<plugin dir>/volumeDevices`, where block volumes live.
    pub fn volume_devices_dir(&self) -> PathBuf {
        self.plugin_dir().join("volumeDevices")
    }

    /// `.../volumeDevices/staging`, the block staging paths.
    pub fn block_staging_dir(&self) -> PathBuf {
        self.volume_devices_dir().join("staging")
    }

    /// `.../volumeDevices/publish`, the block publish dirs.
    pub fn block_publish_root(&self) -> PathBuf {
        self.volume_devices_dir().join("publish")
    }

    /// Block: `<plugin dir>/volumeDevices/<escaped spec>`.
    pub fn block_volume_dir(&self, spec_name: &str) -> Result<PathBuf> {
        let escaped = escape_qualified_name(spec_name);
        check_name("volume spec name", &escaped)?;
        Ok(self.volume_devices_dir().join(escaped))
    }

    /// Block global map path: `.../volumeDevices/<escaped spec>/dev`.
    pub fn block_global_map_path(&self, spec_name: &str) -> Result<PathBuf> {
        Ok(self.block_volume_dir(spec_name)?.join("dev"))
    }

    /// Block data dir holding vol_data.json: `.../volumeDevices/<escaped spec>/data`.
    pub fn block_data_dir(&self, spec_name: &str) -> Result<PathBuf> {
        Ok(self.block_volume_dir(spec_name)?.join("data"))
    }

    /// Block staging path: `.../volumeDevices/staging/<spec>` (spec name not escaped upstream;
    /// kcsi refuses names with `/` here rather than nest directories).
    pub fn block_staging_path(&self, spec_name: &str) -> Result<PathBuf> {
        check_name("volume spec name", spec_name)?;
        Ok(self.block_staging_dir().join(spec_name))
    }

    /// Block publish dir: `.../volumeDevices/publish/<spec>`.
    pub fn block_publish_dir(&self, spec_name: &str) -> Result<PathBuf> {
        check_name("volume spec name", spec_name)?;
        Ok(self.block_publish_root().join(spec_name))
    }

    /// Block publish path: `.../volumeDevices/publish/<spec>/<podUID>`.
    pub fn block_publish_path(&self, spec_name: &str, pod_uid: &str) -> Result<PathBuf> {
        check_name("pod UID", pod_uid)?;
        Ok(self.block_publish_dir(spec_name)?.join(pod_uid))
    }

    /// Block pod device map dir: `<root>/pods/<uid>/volumeDevices/kubernetes.io~csi`.
    pub fn pod_device_map_dir(&self, pod_uid: &str) -> Result<PathBuf> {
        check_name("pod UID", pod_uid)?;
        Ok(self
            .pods_dir()
            .join(pod_uid)
            .join("volumeDevices")
            .join(ESCAPED_PLUGIN_NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_upstream_vectors() {
        assert_eq!(
            attachment_name("vol-123", "test-driver", "fakeNode"),
            "csi-261b4057c77c5cc7ae377d15e67a36c3f1c3a7e5a7ed0ccd246927954ef7a54d"
        );
        assert_eq!(
            attachment_name("testvol-01", "testdriver-01", "testnode-01"),
            "csi-4d8f42c5f953488d695504cfaf9658961d83f72b5ac9bba3e32c2ddb7708e84f"
        );
        assert_eq!(
            ephemeral_volume_handle("test-pod", "test-vol"),
            "csi-77b4ec2e40cdc3e4fe6faa47461d327e48a98aadcbdafbf723ce9a664a5bb118"
        );
        let l = Layout::new("/r");
        assert_eq!(
            l.device_mount_path("test-driver", "vol-123").unwrap(),
            PathBuf::from("/r/plugins/kubernetes.io/csi/test-driver/089d5e4b1e716868b2a08620dae565670ad7fb1eec5205d9a79c39e85fdfc01d/globalmount")
        );
        assert_eq!(
            l.device_mount_path("d", "project/zone/test-vol1")
                .unwrap()
                .parent()
                .unwrap()
                .file_name()
                .unwrap(),
            "499e124114963a0c3bde28794f1045fb2327a7484f2d26afafaf0765f0985a95"
        );
    }

    #[test]
    fn pod_paths_escape_spec_and_refuse_tricks() {
        let l = Layout::new("/r");
        assert_eq!(
            l.pod_mount_path("test-pod", "test.spec.1").unwrap(),
            PathBuf::from("/r/pods/test-pod/volumes/kubernetes.io~csi/test.spec.1/mount")
        );
        assert_eq!(
            l.pod_volume_dir("u", "a/b").unwrap(),
            PathBuf::from("/r/pods/u/volumes/kubernetes.io~csi/a~b")
        );
        assert!(l.pod_mount_path("..", "s").is_err());
        assert!(l.pod_mount_path("u", "..").is_err());
        assert!(l.pod_mount_path("a/b", "s").is_err());
        assert!(l.pod_mount_path("u\0", "s").is_err());
        assert!(l.device_mount_path("../x", "h").is_err());
        assert!(l.device_mount_path("/abs", "h").is_err());
        assert!(l.device_mount_path("a//b", "h").is_err());
    }

    #[test]
    fn block_paths_follow_upstream_layout() {
        let l = Layout::new("/r");
        let base = "/r/plugins/kubernetes.io/csi/volumeDevices";
        assert_eq!(
            l.block_global_map_path("spec-0").unwrap(),
            PathBuf::from(format!("{base}/spec-0/dev"))
        );
        assert_eq!(
            l.block_staging_path("spec-0").unwrap(),
            PathBuf::from(format!("{base}/staging/spec-0"))
        );
        assert_eq!(
            l.block_publish_path("spec-0", "test-pod").unwrap(),
            PathBuf::from(format!("{base}/publish/spec-0/test-pod"))
        );
        assert_eq!(
            l.pod_device_map_dir("test-pod").unwrap(),
            PathBuf::from("/r/pods/test-pod/volumeDevices/kubernetes.io~csi")
        );
    }
}
