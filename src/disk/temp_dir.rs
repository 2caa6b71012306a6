//! kcsi's temp dir below the plugin dir, and the names of kcsi's temp files: a write's temp
//! file and a blank, each named with the writer's pid so that what a killed writer left can be
//! told from a live writer's and removed.

use std::path::{Path, PathBuf};

use super::beneath::Beneath;
use super::paths::Layout;
use super::volume_data::FILE_NAME;
use crate::error::Result;

/// The name of kcsi's temp dir in the plugin dir (the driver dirs' parent): only kcsi's temp
/// files are at its top level, so even a driver of that name (whose volumes are in subdirs)
/// would not be confused with it.
const TEMP_DIR_NAME: &str = ".kcsi-tmp";

/// `<root>/plugins/kubernetes.io/csi/.kcsi-tmp`: where `vol_data.json` is written before it
/// is renamed into place.
pub fn temp_dir(root: &Path) -> PathBuf {
    Layout::new(root).plugin_dir().join(TEMP_DIR_NAME)
}

/// Makes [`temp_dir`], private, under a plugin dir made as the kubelet makes it (0750): when
/// kcsi gets there first, the plugin dir must not be left private.
pub fn make_temp_dir(fs: &Beneath) -> Result<bool> {
    let dir = temp_dir(fs.root_path());
    if let Some(plugin_dir) = dir.parent() {
        fs.mkdir_all(plugin_dir, 0o750)?;
    }
    fs.mkdir_all(&dir, 0o700)
}

/// `.vol_data.json.<pid>.<random>.tmp`: unique per call, so concurrent writers never share one.
pub(super) fn temp_name() -> String {
    format!(
        ".{FILE_NAME}.{}.{:016x}{TEMP_SUFFIX}",
        std::process::id(),
        fastrand::u64(..)
    )
}

const TEMP_SUFFIX: &str = ".tmp";
const BLANK_SUFFIX: &str = ".blank";

/// `.vol_data.json.<pid>.<random>.blank`: a [`super::blanks::Blanks`] file, named apart from a write's temp
/// file so that what a killed writer left can be told from a blank made ahead.
pub(super) fn blank_name() -> String {
    format!(
        ".{FILE_NAME}.{}.{:016x}{BLANK_SUFFIX}",
        std::process::id(),
        fastrand::u64(..)
    )
}

/// The writer's pid when `name` is one of kcsi's temp files (the per-call form, the older
/// per-process `.vol_data.json.<pid>.tmp`, or a blank).
pub(super) fn temp_file_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(&format!(".{FILE_NAME}."))?;
    let rest = rest
        .strip_suffix(TEMP_SUFFIX)
        .or_else(|| rest.strip_suffix(BLANK_SUFFIX))?;
    let pid = rest.split('.').next()?;
    pid.parse().ok()
}

fn process_is_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid != 0 && unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
}

/// Which of kcsi's temp files [`remove_temp_files`] removes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Writers {
    /// Every one (teardown).
    All,
    /// Those of this process (the caller holds the volume's lock, so none is still being
    /// written) and of dead ones.
    OwnAndDead,
    /// Those of dead processes only (the shared temp dir, where other hosts may be writing).
    Dead,
}

/// Removes kcsi's temp files in `dir` written by `which` processes.
pub(super) fn remove_temp_files(fs: &Beneath, dir: &Path, which: Writers) -> Result<()> {
    let own = std::process::id();
    for name in fs.list(dir)? {
        let Some(pid) = name.to_str().and_then(temp_file_pid) else {
            continue;
        };
        let remove = match which {
            Writers::All => true,
            Writers::OwnAndDead => pid == own || !process_is_alive(pid),
            Writers::Dead => !process_is_alive(pid),
        };
        if remove {
            fs.remove_file(
                &dir.join(&name),
                "failed to remove stale volume data temp file",
            )?;
        }
    }
    Ok(())
}

/// Removes what writers killed mid-write left in `root`'s [`temp_dir`] (at host start; the
/// files of live processes, other hosts' writes in progress, stay).
pub fn sweep_temp_dir(root: &Path) -> Result<()> {
    let dir = temp_dir(root);
    if !dir.is_dir() {
        return Ok(());
    }
    remove_temp_files(&Beneath::open(root)?, &dir, Writers::Dead)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::disk::test_support::names;

    #[test]
    fn the_sweep_removes_dead_writers_temp_files_and_blanks_and_keeps_live_ones() {
        let root = tempfile::tempdir().unwrap();
        let tmp = temp_dir(root.path());
        fs::create_dir_all(&tmp).unwrap();
        let live = std::process::id();
        for name in [
            ".vol_data.json.999999999.00ab.tmp".to_string(),
            ".vol_data.json.999999999.00ab.blank".to_string(),
            format!(".vol_data.json.{live}.00cd.tmp"),
            format!(".vol_data.json.{live}.00cd.blank"),
        ] {
            fs::write(tmp.join(name), "").unwrap();
        }
        sweep_temp_dir(root.path()).unwrap();
        assert_eq!(
            names(&tmp),
            vec![
                format!(".vol_data.json.{live}.00cd.blank"),
                format!(".vol_data.json.{live}.00cd.tmp")
            ]
        );
    }
}
