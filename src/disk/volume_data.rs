//! `vol_data.json`, the file the kubelet side trusts for teardown and reconstruction: its
//! keys, its encoding (upstream's: compact JSON, sorted keys, Go's HTML escaping, trailing
//! newline) and its reading. [`super::files::Files`] writes and removes it.

use std::collections::BTreeMap;
use std::path::Path;

use super::beneath::Beneath;
use crate::error::{Error, ErrorKind, Result};

pub const FILE_NAME: &str = "vol_data.json";

/// Far above what kcsi writes (a few hundred bytes); a bigger file is not kcsi's.
pub(super) const MAX_FILE_SIZE: u64 = 1 << 20;

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

/// Reads `<dir>/vol_data.json`. A missing file is `NotFound`; an empty or corrupt one is an
/// I/O error naming the file.
pub fn load(fs: &Beneath, dir: &Path) -> Result<VolumeData> {
    let path = dir.join(FILE_NAME);
    let text = fs.read_to_string(&path, "failed to open volume data file", MAX_FILE_SIZE)?;
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

#[cfg(test)]
mod tests {
    use std::fs;

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
    fn load_reports_missing_and_corrupt_files() {
        let root = tempfile::tempdir().unwrap();
        let fs = Beneath::open(root.path()).unwrap();
        let dir = root.path().join("v");
        fs::create_dir(&dir).unwrap();
        assert_eq!(load(&fs, &dir).unwrap_err().kind(), ErrorKind::NotFound);
        fs::write(dir.join(FILE_NAME), "").unwrap();
        let err = load(&fs, &dir).unwrap_err();
        assert!(
            err.message().contains("failed to parse volume data file")
                && err.message().ends_with("EOF")
        );
        // Hostile files: a FIFO (opening it would block), a huge file, a directory.
        fs::remove_file(dir.join(FILE_NAME)).unwrap();
        let fifo = std::ffi::CString::new(dir.join(FILE_NAME).to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(load(&fs, &dir)
            .unwrap_err()
            .message()
            .ends_with("not a regular file"));
        fs::remove_file(dir.join(FILE_NAME)).unwrap();
        fs::write(
            dir.join(FILE_NAME),
            vec![b' '; (MAX_FILE_SIZE + 1) as usize],
        )
        .unwrap();
        assert!(load(&fs, &dir)
            .unwrap_err()
            .message()
            .contains("larger than"));
        fs::remove_file(dir.join(FILE_NAME)).unwrap();
        fs::create_dir(dir.join(FILE_NAME)).unwrap();
        assert_eq!(load(&fs, &dir).unwrap_err().kind(), ErrorKind::Io);
        // The file itself a symlink, even to a good file beside it: refused, not followed.
        fs::remove_dir(dir.join(FILE_NAME)).unwrap();
        fs::write(dir.join("real.json"), "{}").unwrap();
        std::os::unix::fs::symlink("real.json", dir.join(FILE_NAME)).unwrap();
        let err = load(&fs, &dir).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::FailedPrecondition, "{err}");
    }
}
