//! Pod fsGroup ownership for volumes whose driver does not apply it itself (no
//! VOLUME_MOUNT_GROUP): upstream `supportsFSGroup` and `volume.SetVolumeOwnership`.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::spec::VolumeSpec;
use crate::volume::driver_facts::FsGroupPolicy;

/// `rwMask`, `execMask` and the setgid bit of upstream's ownership code.
const RW_MASK: u32 = 0o660;
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// The pod's `fsGroupChangePolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum ChangePolicy {
    #[default]
    Always,
    OnRootMismatch,
}

/// `supportsFSGroup`: whether kcsi must apply `fs_group` itself for this volume.
pub fn supports_fs_group(
    spec: &VolumeSpec,
    fs_type: &str,
    fs_group: Option<i64>,
    policy: FsGroupPolicy,
    read_only: bool,
) -> bool {
    if fs_group.is_none() || policy == FsGroupPolicy::None || read_only {
        return false;
    }
    if policy == FsGroupPolicy::File {
        return true;
    }
    if fs_type.is_empty() {
        return false;
    }
    if let Some(pv) = &spec.persistent_volume {
        let modes = pv
            .spec
            .as_ref()
            .and_then(|s| s.access_modes.as_deref())
            .unwrap_or(&[]);
        // Upstream `hasReadWriteOnce` accepts either single-node writer mode.
        return modes
            .iter()
            .any(|m| m == "ReadWriteOnce" || m == "ReadWriteOncePod");
    }
    // Inline volumes are always published ReadWriteOnce.
    spec.volume.as_ref().is_some_and(|v| v.csi.is_some())
}

/// `SetVolumeOwnership` for a writable volume: every file and directory below `dir` gets group
/// `gid` and `g+rw`, directories also `g+x` and setgid. With `OnRootMismatch` nothing is done
/// when the root already has that group, those bits and setgid. As upstream, a failed chown or
/// chmod of one file is only logged; an unreadable directory fails the whole change.
pub fn set_volume_ownership(dir: &Path, gid: i64, policy: ChangePolicy) -> Result<()> {
    let gid = u32::try_from(gid)
        .map_err(|_| Error::invalid(format!("fsGroup {gid} is not a valid group ID")))?;
    if policy == ChangePolicy::OnRootMismatch && !requires_permission_change(dir, gid) {
        tracing::debug!(
            "{}",
            csi_log!(
                "skipping fsGroup change of {}: root already matches",
                dir.display()
            )
        );
        return Ok(());
    }
    walk(dir, gid)
}

/// Upstream `requiresPermissionChange` for a writable volume.
fn requires_permission_change(root: &Path, gid: u32) -> bool {
    let Ok(meta) = fs::metadata(root) else {
        return true;
    };
    if meta.gid() != gid || !meta.is_dir() {
        return true;
    }
    let wanted = RW_MASK | EXEC_MASK;
    meta.mode() & wanted != wanted || meta.mode() & SETGID == 0
}

/// Changes everything below `path`, then `path` itself (upstream `walkDeep`): the root changes
/// last, so a walk that fails or is killed half-way leaves the root unchanged and the next
/// `OnRootMismatch` set-up redoes it.
fn walk(path: &Path, gid: u32) -> Result<()> {
    let meta = fs::symlink_metadata(path)
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), &e))?;
    if meta.is_dir() {
        let entries = fs::read_dir(path)
            .map_err(|e| Error::io(format!("cannot read dir {}", path.display()), &e))?;
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::io(format!("cannot read dir {}", path.display()), &e))?;
            walk(&entry.path(), gid)?;
        }
    }
    change(path, gid, &meta);
    Ok(())
}

/// Upstream `changeFilePermission`: lchown to the group; chmod everything but symlinks (a
/// symlink's mode means nothing, and chmod would change its target).
fn change(path: &Path, gid: u32, meta: &fs::Metadata) {
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(gid)) {
        tracing::error!(
            "{}",
            csi_log!("lchown {} to group {gid} failed: {e}", path.display())
        );
    }
    if meta.file_type().is_symlink() {
        return;
    }
    let mut mask = RW_MASK;
    if meta.is_dir() {
        mask |= SETGID | EXEC_MASK;
    }
    let mode = (meta.mode() & 0o7777) | mask;
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(mode)) {
        tracing::error!(
            "{}",
            csi_log!("chmod {} to {mode:o} failed: {e}", path.display())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> VolumeSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn supports_fs_group_follows_upstream_table() {
        use FsGroupPolicy::*;
        let rwo = spec(
            r#"{"persistentVolume":{"spec":{"accessModes":["ReadWriteOnce"],"csi":{"driver":"d","volumeHandle":"h"}}}}"#,
        );
        let rwop = spec(
            r#"{"persistentVolume":{"spec":{"accessModes":["ReadWriteOncePod"],"csi":{"driver":"d","volumeHandle":"h"}}}}"#,
        );
        let no_modes =
            spec(r#"{"persistentVolume":{"spec":{"csi":{"driver":"d","volumeHandle":"h"}}}}"#);
        let inline = spec(r#"{"volume":{"name":"v","csi":{"driver":"d"}}}"#);
        let g = Some(3000);
        assert!(
            !supports_fs_group(&rwo, "ext4", Option::None, File, false),
            "no fsGroup"
        );
        assert!(
            !supports_fs_group(&rwo, "ext4", g, None, false),
            "policy None"
        );
        assert!(
            !supports_fs_group(&rwo, "ext4", g, File, true),
            "read-only, even with File"
        );
        assert!(supports_fs_group(&no_modes, "", g, File, false), "File");
        assert!(
            !supports_fs_group(&rwo, "", g, ReadWriteOnceWithFsType, false),
            "no fsType"
        );
        assert!(
            !supports_fs_group(&no_modes, "ext4", g, ReadWriteOnceWithFsType, false),
            "no access modes"
        );
        assert!(
            supports_fs_group(&rwop, "ext4", g, ReadWriteOnceWithFsType, false),
            "RWOP alone (upstream hasReadWriteOnce)"
        );
        assert!(
            supports_fs_group(&rwo, "ext4", g, ReadWriteOnceWithFsType, false),
            "RWO"
        );
        assert!(
            supports_fs_group(&inline, "ext4", g, ReadWriteOnceWithFsType, false),
            "inline"
        );
    }

    #[test]
    fn ownership_sets_group_bits_and_setgid_and_skips_matching_root() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        fs::create_dir(&sub).unwrap();
        fs::write(sub.join("f"), "x").unwrap();
        fs::set_permissions(sub.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        let passwd_mode = fs::metadata("/etc/passwd").unwrap().mode();
        set_volume_ownership(dir.path(), 3000, ChangePolicy::Always).unwrap();
        for p in [dir.path().to_path_buf(), sub.clone()] {
            let m = fs::metadata(&p).unwrap();
            assert_eq!(m.gid(), 3000);
            assert_eq!(m.mode() & 0o2770, 0o2770, "{}", p.display());
        }
        let f = fs::metadata(sub.join("f")).unwrap();
        assert_eq!((f.gid(), f.mode() & 0o7777), (3000, 0o660));
        assert_eq!(
            fs::symlink_metadata(dir.path().join("link")).unwrap().gid(),
            3000
        );
        assert_eq!(
            fs::metadata("/etc/passwd").unwrap().mode(),
            passwd_mode,
            "symlink target untouched"
        );

        // The root matches now: OnRootMismatch leaves a changed child alone.
        std::os::unix::fs::lchown(sub.join("f"), None, Some(0)).unwrap();
        set_volume_ownership(dir.path(), 3000, ChangePolicy::OnRootMismatch).unwrap();
        assert_eq!(fs::metadata(sub.join("f")).unwrap().gid(), 0);
        set_volume_ownership(dir.path(), 3000, ChangePolicy::Always).unwrap();
        assert_eq!(fs::metadata(sub.join("f")).unwrap().gid(), 3000);
    }

    /// `dir/deep` and a chain of subdirectories below it longer than PATH_MAX, made relative to
    /// open directories: reaching the bottom by its full path fails (ENAMETOOLONG), which
    /// stops an ownership walk half-way as an unreadable directory would.
    fn make_deeper_than_path_max(dir: &Path) {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let top = dir.join("deep");
        fs::create_dir(&top).unwrap();
        let name = std::ffi::CString::new("d".repeat(200)).unwrap();
        let mut fd = OwnedFd::from(fs::File::open(&top).unwrap());
        for _ in 0..25 {
            // SAFETY: plain syscalls on a valid directory fd and a NUL-terminated name.
            let next = unsafe {
                assert_eq!(libc::mkdirat(fd.as_raw_fd(), name.as_ptr(), 0o755), 0);
                libc::openat(
                    fd.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            assert!(next >= 0, "{}", std::io::Error::last_os_error());
            // SAFETY: `next` is a new fd this test owns.
            fd = unsafe { OwnedFd::from_raw_fd(next) };
        }
    }

    #[test]
    fn interrupted_walk_leaves_the_root_for_on_root_mismatch_to_redo() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), "x").unwrap();
        make_deeper_than_path_max(dir.path());
        let err = set_volume_ownership(dir.path(), 3000, ChangePolicy::OnRootMismatch).unwrap_err();
        assert!(err.message().contains("cannot stat"), "{}", err.message());
        assert_ne!(
            fs::metadata(dir.path()).unwrap().gid(),
            3000,
            "the root changes last: a failed walk leaves it unchanged"
        );
        assert!(requires_permission_change(dir.path(), 3000));

        fs::remove_dir_all(dir.path().join("deep")).unwrap();
        set_volume_ownership(dir.path(), 3000, ChangePolicy::OnRootMismatch).unwrap();
        assert_eq!(fs::metadata(dir.path()).unwrap().gid(), 3000);
        assert_eq!(fs::metadata(dir.path().join("f")).unwrap().gid(), 3000);
    }
}
