//! `vol_data.json` — the file the kubelet side trusts for teardown and reconstruction — and the
//! directory cleanup around it.
//!
//! Differs from upstream on purpose (kubernetes/kubernetes#108217): the file is written
//! atomically (temp file, fsync, rename, directory fsync), so a crash leaves the old file or the
//! new one, never an empty one. The format is upstream's: compact JSON, sorted keys, Go's HTML
//! escaping, trailing newline.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind as IoKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

pub const FILE_NAME: &str = "vol_data.json";

pub mod keys {
    pub const SPEC_VOL_ID: &str = "specVolID";
    pub const VOLUME_HANDLE: &str = "volumeHandle";
    pub const DRIVER_NAME: &str = "driverName";
    pub const NODE_NAME: &str = "nodeName";
    pub const LIFECYCLE_MODE: &str = "volumeLifecycleMode";
    pub const ATTACHMENT_ID: &str = "attachmentID";
    pub const SELINUX_MOUNT_CONTEXT: &str = "seLinuxMountContext";
}

pub type VolumeData = BTreeMap<String, String>;

/// Go's `json.Encoder` output for a `map[string]string`: sorted keys, `<>&` and U+2028/U+2029
/// escaped, newline at the end.
pub fn encode(data: &VolumeData) -> String {
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".to_string());
    let mut out = String::with_capacity(json.len() + 1);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

/// Writes `<dir>/vol_data.json` durably and atomically.
pub fn save(dir: &Path, data: &VolumeData) -> Result<()> {
    let path = dir.join(FILE_NAME);
    let tmp = dir.join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let failed = |e: std::io::Error| {
        Error::io(
            format!("failed to save volume data file [{}]", path.display()),
            &e,
        )
    };
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            // Upstream's os.Create (csi_util.go saveVolumeData): 0666 less the umask.
            .mode(0o666)
            .open(&tmp)?;
        f.write_all(encode(data).as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        failed(e)
    })
}

/// Reads `<dir>/vol_data.json`. A missing file is `NotFound`; an empty or corrupt one is an
/// I/O error naming the file.
pub fn load(dir: &Path) -> Result<VolumeData> {
    let path = dir.join(FILE_NAME);
    let text = fs::read_to_string(&path).map_err(|e| {
        let err = Error::io(
            format!("failed to open volume data file [{}]", path.display()),
            &e,
        );
        if e.kind() == IoKind::NotFound {
            err.with_kind(ErrorKind::NotFound)
        } else {
            err
        }
    })?;
    serde_json::from_str(&text).map_err(|e| {
        let detail = if text.trim().is_empty() {
            "EOF".to_string()
        } else {
            e.to_string()
        };
        Error::new(
            ErrorKind::Io,
            format!(
                "failed to parse volume data file [{}]: {detail}",
                path.display()
            ),
        )
    })
}

/// A required key of loaded volume data.
pub fn get<'a>(data: &'a VolumeData, key: &str, dir: &Path) -> Result<&'a str> {
    data.get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!(
                    "volume data file [{}] has no {key:?}",
                    dir.join(FILE_NAME).display()
                ),
            )
        })
}

/// Mount points from `/proc/self/mountinfo` (octal escapes decoded).
fn mount_points() -> Result<Vec<PathBuf>> {
    let text = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error::io("cannot read /proc/self/mountinfo", &e))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_octal(p)))
        .collect())
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` itself is a mount point. Reads the mount table rather than comparing device
/// numbers, so same-filesystem bind mounts (what most drivers publish) are seen too.
pub fn is_mount_point(path: &Path) -> Result<bool> {
    let canonical = match fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == IoKind::NotFound => return Ok(false),
        // A broken mount (e.g. dead FUSE/NFS) cannot be resolved but is still mounted.
        Err(_) => path.to_path_buf(),
    };
    Ok(mount_points()?.iter().any(|m| *m == canonical || m == path))
}

/// Upstream `removeMountDir`: unless `mount_path` is still mounted, removes it (only if empty),
/// then `<parent>/vol_data.json`, then the parent. A mounted path is left alone (not an
/// error): removing it would lose the data needed to unmount it later.
pub fn remove_mount_dir(mount_path: &Path) -> Result<()> {
    if is_mount_point(mount_path)? {
        tracing::warn!(
            "{}",
            csi_log!("{} is still mounted, not removing it", mount_path.display())
        );
        return Ok(());
    }
    remove_if_exists(mount_path, "failed to remove dir")?;
    if let Some(parent) = mount_path.parent() {
        remove_file_if_exists(&parent.join(FILE_NAME), "failed to delete volume data file")?;
        remove_if_exists(parent, "failed to delete volume path")?;
    }
    Ok(())
}

fn remove_if_exists(dir: &Path, what: &str) -> Result<()> {
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == IoKind::NotFound => Ok(()),
        // A file where the driver created one (block) is removed the same way.
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => remove_file_if_exists(dir, what),
        Err(e) => Err(Error::io(format!("{what} [{}]", dir.display()), &e)),
    }
}

fn remove_file_if_exists(file: &Path, what: &str) -> Result<()> {
    match fs::remove_file(file) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == IoKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("{what} [{}]", file.display()), &e)),
    }
}

/// Creates `dir` and missing parents with mode 0750, as the kubelet does.
pub fn make_dirs(dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
        .map_err(|e| {
            Error::io(
                format!("failed to create dir {:?}", dir.display().to_string()),
                &e,
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_matches_go_json_encoder() {
        let data: VolumeData = [
            ("volumeHandle", "vol-123"),
            ("driverName", "test-driver"),
            ("specVolID", "a<b>&c"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            encode(&data),
            "{\"driverName\":\"test-driver\",\"specVolID\":\"a\\u003cb\\u003e\\u0026c\",\"volumeHandle\":\"vol-123\"}\n"
        );
    }

    #[test]
    fn save_then_load_round_trips_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        save(dir.path(), &data).unwrap();
        assert_eq!(load(dir.path()).unwrap(), data);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
    }

    #[test]
    fn load_reports_missing_and_corrupt_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap_err().kind(), ErrorKind::NotFound);
        fs::write(dir.path().join(FILE_NAME), "").unwrap();
        let err = load(dir.path()).unwrap_err();
        assert!(
            err.message().contains("failed to parse volume data file")
                && err.message().ends_with("EOF")
        );
    }

    #[test]
    fn unescape_octal_decodes_spaces() {
        assert_eq!(unescape_octal("/a\\040b"), "/a b");
    }
}
