//! What the disk layer's unit tests share.

use std::fs;
use std::path::{Path, PathBuf};

use super::files::Files;

/// The process umask.
pub(crate) fn umask() -> u32 {
    // SAFETY: umask only reads and restores the process mask (briefly the common 022).
    unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m as u32
    }
}

/// The names in `dir`, sorted.
pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// A root without a blank pool, with one volume dir below it.
pub(crate) fn volume_dir() -> (tempfile::TempDir, Files, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let files = Files::without_blanks(root.path());
    let dir = root.path().join("v");
    files.open().unwrap().make_dirs(&dir).unwrap();
    (root, files, dir)
}
