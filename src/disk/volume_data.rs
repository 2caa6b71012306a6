//! `vol_data.json` — the file the kubelet side trusts for teardown and reconstruction — and the
//! directory cleanup around it.
//!
//! Differs from upstream on purpose (kubernetes/kubernetes#108217): the file is written
//! atomically (a temp file unique to the call, fsync, rename, directory fsync), so a crash leaves
//! the old file or the new one, never an empty one; [`save_then_sync`] leaves the directory
//! fsync to the caller, to run beside the driver call the file was written for, and [`stage`]
//! lets it write and fsync the temp file while the volume's directories are made (its rename
//! waits for them: [`Staged::place`]). The temp file lives in kcsi's own
//! directory below the plugin dir ([`temp_dir`]), not in the pod volume or global mount dir: a
//! write killed half-way leaves nothing there (the kubelet's orphaned-pod cleanup removes only
//! empty dirs, and a dir without `vol_data.json` is never torn down), and what it leaves in the
//! temp dir is swept when a host starts. Only when that dir is on another filesystem than the
//! volume dir (no atomic rename between them) is the temp file made beside the file, and then
//! removed by the next save or teardown. Every path is resolved below the root without following
//! symlinks ([`Beneath`]). The format and mode are upstream's: compact JSON, sorted keys, Go's
//! HTML escaping, trailing newline, 0666 less the umask.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::beneath::{Beneath, DirSync, Entry, TempFile};
use super::blanks::{Blank, Blanks};
use super::mounts::is_mount_point;
use super::paths::Layout;
use crate::error::{Error, ErrorKind, Result};

pub const FILE_NAME: &str = "vol_data.json";

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

/// `.vol_data.json.<pid>.<random>.tmp`: unique per call, so concurrent writers never share one.
fn temp_name() -> String {
    format!(
        ".{FILE_NAME}.{}.{:016x}{TEMP_SUFFIX}",
        std::process::id(),
        fastrand::u64(..)
    )
}

const TEMP_SUFFIX: &str = ".tmp";
const BLANK_SUFFIX: &str = ".blank";

/// `.vol_data.json.<pid>.<random>.blank`: a [`Blanks`] file, named apart from a write's temp
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
fn temp_file_pid(name: &str) -> Option<u32> {
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
enum Writers {
    /// Every one (teardown).
    All,
    /// Those of this process (the caller holds the volume's lock, so none is still being
    /// written) and of dead ones.
    OwnAndDead,
    /// Those of dead processes only (the shared temp dir, where other hosts may be writing).
    Dead,
}

/// Removes kcsi's temp files in `dir` written by `which` processes.
fn remove_temp_files(fs: &Beneath, dir: &Path, which: Writers) -> Result<()> {
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

/// Writes `<dir>/vol_data.json` durably and atomically through a temp file in [`temp_dir`]
/// (one of `blanks` when there is one ready), then removes stale temp files an older kcsi or the
/// other-filesystem case left in `dir`.
pub fn save(fs: &Beneath, blanks: &Blanks, dir: &Path, data: &VolumeData) -> Result<()> {
    save_then_sync(fs, blanks, dir, data)?.wait()
}

/// [`save`] up to the directory fsync, which the returned [`DirSync`] does: the file is in
/// place, its content durable, when this returns (so a kubelet restarted meanwhile finds it),
/// and the caller may sync the directory while it calls the driver.
pub fn save_then_sync(
    fs: &Beneath,
    blanks: &Blanks,
    dir: &Path,
    data: &VolumeData,
) -> Result<DirSync> {
    let bytes = encode(data).into_bytes();
    stage(fs, blanks.take(bytes.len()), dir, bytes)?.place(fs)
}

/// A [`save`] up to its rename: the file's content (`bytes`, [`encode`]d) written and made
/// durable under a temp name in [`temp_dir`] (into `blank` when given, else a new file), which
/// needs none of `dir`'s levels, so it may run while they are made.
pub fn stage(fs: &Beneath, blank: Option<Blank>, dir: &Path, bytes: Vec<u8>) -> Result<Staged> {
    let tmp_dir = temp_dir(fs.root_path());
    let path = dir.join(FILE_NAME);
    let file = match blank.map(Blank::into_made) {
        // A blank is in the temp dir, so that dir exists.
        Some(b) => Pending::Temp(fs.fill_blank(&path, b.path, b.file, b.len, &bytes)?),
        None => match make_temp_dir(fs) {
            Ok(_) => Pending::Temp(fs.write_temp(&path, &tmp_dir, &temp_name(), &bytes)?),
            Err(e) => {
                tracing::warn!("{}", csi_log!("{e}; writing the temp file beside the file"));
                Pending::Beside(bytes)
            }
        },
    };
    Ok(Staged {
        dir: dir.to_path_buf(),
        file,
        dir_is_new: false,
    })
}

/// A `vol_data.json` [`stage`]d, not yet in place (its temp file removed if dropped so).
pub struct Staged {
    dir: PathBuf,
    file: Pending,
    /// `dir` was made by the caller under the volume's lock: no temp file can be there.
    dir_is_new: bool,
}

enum Pending {
    Temp(TempFile),
    /// kcsi's temp dir could not be made: the file is written beside its place, once the
    /// directory exists.
    Beside(Vec<u8>),
}

impl Staged {
    /// Says that the caller made the file's directory itself, holding the volume's lock, so
    /// [`Staged::place`] need not look there for stale temp files.
    pub fn in_new_dir(mut self) -> Staged {
        self.dir_is_new = true;
        self
    }

    /// Renames the file into place, as [`save_then_sync`] returns.
    pub fn place(self, fs: &Beneath) -> Result<DirSync> {
        let sync = match self.file {
            Pending::Temp(temp) => temp.place()?,
            Pending::Beside(bytes) => {
                fs.write_atomic(&self.dir, FILE_NAME, &self.dir, &temp_name(), &bytes)?
            }
        };
        if !self.dir_is_new {
            if let Err(e) = remove_temp_files(fs, &self.dir, Writers::OwnAndDead) {
                tracing::warn!("{}", csi_log!("{e}"));
            }
        }
        Ok(sync)
    }
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

/// Whether `dir` exists and holds nothing but what an interrupted kcsi operation leaves once
/// its `vol_data.json` is gone: kcsi's temp files, and (when `data_subdir` names one) a
/// subdirectory holding only those. The file is written before anything is staged or published
/// and removed only after the mount or staging dir, so such a volume needs no driver to remove;
/// a mount dir still there means the file went missing some other way, and it is left alone.
pub fn only_leftovers(fs: &Beneath, dir: &Path, data_subdir: Option<&str>) -> Result<bool> {
    if fs.entry(dir)? != Entry::Dir {
        return Ok(false);
    }
    for name in fs.list(dir)? {
        if name.to_str().and_then(temp_file_pid).is_some() {
            continue;
        }
        let sub = dir.join(&name);
        let is_data_dir = data_subdir.is_some_and(|d| name == d);
        if !is_data_dir || !only_leftovers(fs, &sub, None)? {
            return Ok(false);
        }
    }
    Ok(true)
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

/// Upstream `removeMountDir`: unless `mount_path` is still mounted, removes it (only if empty),
/// then kcsi's temp files and `<parent>/vol_data.json`, then the parent. A mounted path is left
/// alone (not an error): removing it would lose the data needed to unmount it later. Each step
/// tolerates what an interrupted earlier teardown already removed.
pub fn remove_mount_dir(fs: &Beneath, blanks: &Blanks, mount_path: &Path) -> Result<()> {
    let entry = fs.entry(mount_path)?;
    if entry != Entry::Missing && is_mount_point(mount_path)? {
        tracing::warn!(
            "{}",
            csi_log!("{} is still mounted, not removing it", mount_path.display())
        );
        return Ok(());
    }
    fs.remove_entry(mount_path, entry, "failed to remove dir")?;
    match mount_path.parent() {
        Some(parent) => remove_volume_data_dir(fs, blanks, parent),
        None => Ok(()),
    }
}

/// Removes kcsi's temp files and `vol_data.json` in `dir` (the file kept as one of `blanks`
/// when there is room), then `dir` (which must then be empty).
pub fn remove_volume_data_dir(fs: &Beneath, blanks: &Blanks, dir: &Path) -> Result<()> {
    remove_temp_files(fs, dir, Writers::All)?;
    blanks.recycle(
        fs,
        &dir.join(FILE_NAME),
        "failed to delete volume data file",
    )?;
    fs.remove_dir(dir, "failed to delete volume path")
}

/// Creates `dir` and missing parents with mode 0750, as the kubelet does. True when `dir`
/// itself was made by this call.
pub fn make_dirs(fs: &Beneath, dir: &Path) -> Result<bool> {
    fs.mkdir_all(dir, 0o750)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::fs;
    use std::path::PathBuf;

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

    /// A root with one volume dir below it.
    fn volume_dir() -> (tempfile::TempDir, Beneath, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let fs = Beneath::open(root.path()).unwrap();
        let dir = root.path().join("v");
        make_dirs(&fs, &dir).unwrap();
        (root, fs, dir)
    }

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

    #[test]
    fn make_dirs_makes_every_missing_level_0750_and_refuses_a_file_in_the_way() {
        use std::os::unix::fs::PermissionsExt;
        let (root, fs, dir) = volume_dir();
        let deep = dir.join("a/b/c");
        assert!(make_dirs(&fs, &deep).unwrap(), "made now");
        assert!(!make_dirs(&fs, &deep).unwrap(), "there already");
        for level in [dir.join("a"), dir.join("a/b"), deep.clone()] {
            let mode = fs::metadata(&level).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o750 & !umask(), "{}", level.display());
        }
        fs::write(dir.join("file"), "").unwrap();
        for blocked in [dir.join("file"), dir.join("file/x")] {
            let err = make_dirs(&fs, &blocked).unwrap_err();
            assert!(err.message().contains("failed to create dir"), "{err}");
        }
        assert_eq!(names(root.path()), vec!["v".to_string()]);
    }

    #[test]
    fn save_then_sync_has_the_whole_file_in_place_before_the_directory_sync() {
        let (_root, fs, dir) = volume_dir();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        let sync = save_then_sync(&fs, &Blanks::none(), &dir, &data).unwrap();
        assert_eq!(load(&fs, &dir).unwrap(), data);
        assert_eq!(names(&dir), vec![FILE_NAME.to_string()]);
        sync.wait().unwrap();
    }

    #[test]
    fn stage_writes_before_the_dir_exists_and_leaves_nothing_when_dropped_unplaced() {
        let (root, fs, dir) = volume_dir();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        let later = dir.join("not/yet");
        let staged = stage(&fs, None, &later, encode(&data).into_bytes()).unwrap();
        let tmp = temp_dir(root.path());
        assert_eq!(names(&tmp).len(), 1, "the temp file is written first");
        drop(staged);
        assert!(names(&tmp).is_empty());

        let staged = stage(&fs, None, &later, encode(&data).into_bytes()).unwrap();
        make_dirs(&fs, &later).unwrap();
        staged.place(&fs).unwrap().wait().unwrap();
        assert_eq!(load(&fs, &later).unwrap(), data);
        assert!(names(&tmp).is_empty());
    }

    #[test]
    fn save_then_load_round_trips_and_leaves_no_temp_file() {
        let (_root, fs, dir) = volume_dir();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        save(&fs, &Blanks::none(), &dir, &data).unwrap();
        assert_eq!(load(&fs, &dir).unwrap(), data);
        assert_eq!(names(&dir), vec![FILE_NAME.to_string()]);
    }

    #[test]
    fn save_creates_the_file_0666_less_umask_as_go_os_create() {
        use std::os::unix::fs::PermissionsExt;
        let (_root, fs, dir) = volume_dir();
        save(&fs, &Blanks::none(), &dir, &VolumeData::new()).unwrap();
        let mode = fs::metadata(dir.join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o666 & !umask());
    }

    #[test]
    fn a_first_save_makes_the_plugin_dir_0750_and_only_the_temp_dir_private() {
        use std::os::unix::fs::PermissionsExt;
        let (root, fs, dir) = volume_dir();
        save(&fs, &Blanks::none(), &dir, &VolumeData::new()).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let tmp = temp_dir(root.path());
        assert_eq!(mode(&tmp), 0o700 & !umask());
        // The kubelet's own mode for it (upstream's plugin dir is made by os.MkdirAll 0750).
        assert_eq!(mode(tmp.parent().unwrap()), 0o750 & !umask());
    }

    #[test]
    fn save_and_teardown_remove_stale_temp_files_of_dead_writers() {
        let (_root, fs, dir) = volume_dir();
        // A killed kcsi (pid far above pid_max) left both temp name forms; a foreign file stays.
        for stale in [
            ".vol_data.json.999999999.tmp",
            ".vol_data.json.999999999.00ab.tmp",
        ] {
            fs::write(dir.join(stale), "{").unwrap();
        }
        fs::write(dir.join(".vol_data.json.1.tmp"), "{").unwrap();
        fs::write(dir.join("other"), "").unwrap();
        save(&fs, &Blanks::none(), &dir, &VolumeData::new()).unwrap();
        // pid 1 is alive: its temp file is another writer's until teardown.
        assert_eq!(
            names(&dir),
            vec![".vol_data.json.1.tmp", "other", FILE_NAME]
        );
        fs::remove_file(dir.join("other")).unwrap();
        fs::create_dir(dir.join("mount")).unwrap();
        assert!(!only_leftovers(&fs, &dir, None).unwrap());
        remove_mount_dir(&fs, &Blanks::none(), &dir.join("mount")).unwrap();
        assert!(!dir.exists());
    }

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

    #[test]
    fn leftovers_are_temp_files_and_a_data_dir_of_them_only() {
        let (_root, fs, dir) = volume_dir();
        assert!(only_leftovers(&fs, &dir, None).unwrap());
        fs::write(dir.join(".vol_data.json.999999999.1.tmp"), "").unwrap();
        assert!(only_leftovers(&fs, &dir, None).unwrap());
        fs::create_dir(dir.join("data")).unwrap();
        fs::write(dir.join("data/.vol_data.json.999999999.tmp"), "").unwrap();
        assert!(!only_leftovers(&fs, &dir, None).unwrap());
        assert!(only_leftovers(&fs, &dir, Some("data")).unwrap());
        // An empty mount dir may still be what a driver staged at: not a leftover.
        fs::create_dir(dir.join("mount")).unwrap();
        assert!(!only_leftovers(&fs, &dir, Some("data")).unwrap());
        assert!(!only_leftovers(&fs, &dir.join("missing"), None).unwrap());
    }

    #[test]
    fn load_reports_missing_and_corrupt_files() {
        let (_root, fs, dir) = volume_dir();
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

    #[test]
    fn a_save_into_a_dir_made_for_it_skips_the_temp_file_sweep_and_others_keep_it() {
        let (_root, fs, dir) = volume_dir();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        let dead = ".vol_data.json.999999999.1.tmp";
        fs::write(dir.join(dead), "").unwrap();
        stage(&fs, None, &dir, encode(&data).into_bytes())
            .unwrap()
            .place(&fs)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(
            names(&dir),
            vec![FILE_NAME],
            "a dead writer's file is swept"
        );
        fs::write(dir.join(dead), "").unwrap();
        let staged = stage(&fs, None, &dir, encode(&data).into_bytes())
            .unwrap()
            .in_new_dir();
        staged.place(&fs).unwrap().wait().unwrap();
        assert_eq!(
            names(&dir),
            vec![dead, FILE_NAME],
            "no listing of a new dir"
        );
        assert_eq!(load(&fs, &dir).unwrap(), data);
    }

    #[test]
    fn symlinks_below_the_root_are_refused_not_followed() {
        let (root, fs, dir) = volume_dir();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        let via_link = root.path().join("link/v");
        let err = make_dirs(&fs, &via_link).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::FailedPrecondition, "{err}");
        assert!(
            err.message().contains(&format!(
                "{} is a symlink",
                root.path().join("link").display()
            )),
            "{err}"
        );
        assert!(save(
            &fs,
            &Blanks::none(),
            &root.path().join("link"),
            &VolumeData::new()
        )
        .is_err());
        fs::write(outside.path().join(FILE_NAME), "{}").unwrap();
        assert_eq!(
            load(&fs, &root.path().join("link")).unwrap_err().kind(),
            ErrorKind::FailedPrecondition
        );
        std::os::unix::fs::symlink(outside.path(), dir.join("mount")).unwrap();
        assert!(remove_mount_dir(&fs, &Blanks::none(), &dir.join("mount")).is_err());
        assert!(fs
            .check_no_symlink(&dir.join("mount/x"), "NodePublish")
            .is_err());
        assert!(fs
            .check_no_symlink(&dir.join("new/x"), "NodePublish")
            .is_ok());
        assert_eq!(names(outside.path()), vec![FILE_NAME.to_string()]);
    }
}
