//! The kernel's mount table, `/proc/self/mountinfo`: kcsi's one reader of it (the library's
//! mount checks and the CLI's clean-up both use it).
//!
//! The mount point is the fifth field; the kernel escapes space, tab, newline and backslash in
//! it as three octal digits (`\040`, `\011`, `\012`, `\134`) and passes every other byte as it
//! is, so a path that is not ASCII (or not UTF-8) comes back byte for byte.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::ErrorKind as IoKind;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// The mount points of the current mount table, in table order.
pub fn mount_points() -> Result<Vec<PathBuf>> {
    let table =
        std::fs::read(MOUNTINFO).map_err(|e| Error::io("cannot read /proc/self/mountinfo", &e))?;
    Ok(parse_mount_points(&table))
}

/// The mount point of each line of a mountinfo table.
pub fn parse_mount_points(table: &[u8]) -> Vec<PathBuf> {
    table
        .split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b' ').nth(4))
        .map(unescape)
        .collect()
}

/// A mountinfo field with its octal escapes decoded.
pub fn unescape(field: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if let Some(&[b'\\', a, b, c]) = field.get(i..i + 4) {
            if (b'0'..=b'3').contains(&a) && [b, c].iter().all(|d| (b'0'..=b'7').contains(d)) {
                out.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
                i += 4;
                continue;
            }
        }
        out.push(field[i]);
        i += 1;
    }
    PathBuf::from(OsString::from_vec(out))
}

/// One reading of the mount table, for many questions in a row.
pub struct MountTable(HashSet<PathBuf>);

impl MountTable {
    pub fn read() -> Result<MountTable> {
        Ok(MountTable(mount_points()?.into_iter().collect()))
    }

    /// Whether `path` itself is a mount point. The table rather than device numbers, so
    /// same-filesystem bind mounts (what most drivers publish) are seen too.
    pub fn contains(&self, path: &Path) -> bool {
        match std::fs::canonicalize(path) {
            Ok(p) => self.0.contains(&p) || self.0.contains(path),
            Err(e) if e.kind() == IoKind::NotFound => false,
            // A broken mount (e.g. dead FUSE/NFS) cannot be resolved but is still mounted.
            Err(_) => self.0.contains(path),
        }
    }
}

/// Whether `path` itself is a mount point: the kernel's mount-root attribute where it gives one
/// (statx, Linux 5.8), else the table ([`MountTable::contains`]). Both see same-filesystem bind
/// mounts; the attribute costs one system call where the table is read whole, and a node with
/// a hundred pods has thousands of lines in it.
pub fn is_mount_point(path: &Path) -> Result<bool> {
    if let Some(root) = mount_root_attribute(path) {
        return Ok(root);
    }
    Ok(MountTable::read()?.contains(path))
}

/// `None` when the kernel does not say, or `path` cannot be looked at (a broken FUSE or NFS
/// mount is still in the table).
fn mount_root_attribute(path: &Path) -> Option<bool> {
    use rustix::fs::{statx, AtFlags, StatxAttributes, StatxFlags, CWD};
    match statx(CWD, path, AtFlags::NO_AUTOMOUNT, StatxFlags::empty()) {
        Ok(st) => st
            .stx_attributes_mask
            .contains(StatxAttributes::MOUNT_ROOT)
            .then(|| st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)),
        Err(rustix::io::Errno::NOENT) => Some(false),
        Err(_) => None,
    }
}

/// The mount points at or below `root`, deepest first, each once.
pub fn mounts_below(root: &Path) -> Result<Vec<PathBuf>> {
    let mut found: Vec<PathBuf> = mount_points()?
        .into_iter()
        .filter(|p| p.starts_with(root))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.dedup();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two lines of a real table: the kernel's escapes, and a mount point in UTF-8.
    const TABLE: &[u8] = b"36 35 98:0 / /mnt/a\\040b\\011c\\012d\\134e rw,noatime master:1 - ext3 /dev/root rw\n\
37 35 98:0 /x /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/\xc3\xa9t\xc3\xa9/mount rw - tmpfs t rw\n";

    #[test]
    fn is_mount_point_agrees_with_the_table() {
        let table = MountTable::read().unwrap();
        let dir = tempfile::tempdir().unwrap();
        for path in [
            Path::new("/"),
            Path::new("/proc"),
            dir.path(),
            &dir.path().join("none"),
        ] {
            assert_eq!(
                is_mount_point(path).unwrap(),
                table.contains(path),
                "{}",
                path.display()
            );
        }
        assert!(is_mount_point(Path::new("/proc")).unwrap());
        assert!(!is_mount_point(dir.path()).unwrap());
    }

    #[test]
    fn is_mount_point_sees_a_bind_mount_of_the_same_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
        std::fs::create_dir(&src).unwrap();
        std::fs::create_dir(&dst).unwrap();
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let (csrc, cdst) = (c(&src), c(&dst));
        // SAFETY: plain mount(2)/umount(2) calls on NUL-terminated paths that live meanwhile.
        let rc = unsafe {
            libc::mount(
                csrc.as_ptr(),
                cdst.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        // Nothing that can panic before the unmount: a failed test must not leave the mount.
        let seen = (
            is_mount_point(&dst).ok(),
            MountTable::read().ok().map(|t| t.contains(&dst)),
        );
        // SAFETY: as above.
        unsafe { libc::umount2(cdst.as_ptr(), libc::MNT_DETACH) };
        assert_eq!(seen, (Some(true), Some(true)));
        assert!(!is_mount_point(&dst).unwrap());
    }

    #[test]
    fn unescape_decodes_space_tab_newline_and_backslash() {
        assert_eq!(unescape(b"/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(unescape(b"\\011\\012\\134\\040"), PathBuf::from("\t\n\\ "));
    }

    #[test]
    fn unescape_keeps_what_is_not_an_escape() {
        // Too short, not octal, or above a byte: passed through as the kernel wrote it.
        assert_eq!(unescape(b"/a\\04"), PathBuf::from("/a\\04"));
        assert_eq!(unescape(b"/a\\089"), PathBuf::from("/a\\089"));
        assert_eq!(unescape(b"/a\\777"), PathBuf::from("/a\\777"));
    }

    #[test]
    fn non_ascii_mount_points_come_back_byte_for_byte() {
        assert_eq!(
            parse_mount_points(TABLE),
            vec![
                PathBuf::from("/mnt/a b\tc\nd\\e"),
                PathBuf::from("/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/été/mount"),
            ]
        );
        // Not UTF-8 at all (Latin-1 "é"): still the same bytes.
        let latin1 = parse_mount_points(b"1 2 0:1 / /mnt/\xe9\\040x rw - tmpfs t rw\n");
        assert_eq!(latin1[0].as_os_str().as_encoded_bytes(), b"/mnt/\xe9 x");
    }

    #[test]
    fn the_live_table_has_the_root_mounted() {
        assert!(mount_points().unwrap().contains(&PathBuf::from("/")));
        assert!(is_mount_point(Path::new("/")).unwrap());
        assert!(!is_mount_point(Path::new("/nonexistent/kcsi")).unwrap());
    }
}
