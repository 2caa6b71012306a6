//! The one owner of the files kcsi writes below a host's root: the root, opened once (and
//! again once it was removed); the blank pool; kcsi's temp dir. Volume operations save, load
//! and remove `vol_data.json` and make and remove volume directories through it, on the root
//! opened for the operation ([`Files::open`]). Every path is resolved below the root without
//! following symlinks ([`Beneath`]).

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::beneath::{Beneath, DirSync, Entry};
use super::blanks::Blanks;
use super::mounts::is_mount_point;
use super::paths::Layout;
use super::save::{stage, Staged};
use super::temp_dir::{remove_temp_files, sweep_temp_dir, temp_file_pid, Writers};
use super::volume_data::{self, encode, VolumeData, FILE_NAME};
use crate::error::{Error, Result};

/// kcsi's files below one host's root.
pub struct Files {
    layout: Layout,
    /// The root, opened once for all of the host's operations: opening it by path cost each
    /// volume lifecycle some seven path walks. Opened again when the directory it holds was
    /// removed (a host recreates its root when missing).
    opened: Mutex<Option<Arc<Beneath>>>,
    /// Temp files for `vol_data.json` made ahead (none for a controller host, which writes no
    /// volume data).
    blanks: Blanks,
}

/// The root opened for one operation, with the host's blank pool.
pub struct OpenFiles<'a> {
    fs: Arc<Beneath>,
    blanks: &'a Blanks,
}

impl Files {
    /// The files of a host rooted at `root`, with a blank pool.
    pub fn new(root: &Path) -> Files {
        Files::with(root, Blanks::new(root))
    }

    /// The files below `root` without a blank pool: every save makes a new temp file.
    pub fn without_blanks(root: &Path) -> Files {
        Files::with(root, Blanks::none())
    }

    fn with(root: &Path, blanks: Blanks) -> Files {
        Files {
            layout: Layout::new(root),
            opened: Mutex::default(),
            blanks,
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The root opened for file operations that follow no symlink below it; opened once, and
    /// again when it was removed.
    pub fn open(&self) -> Result<OpenFiles<'_>> {
        let opened = || self.opened.lock().unwrap_or_else(|p| p.into_inner());
        let cached = opened().clone();
        let fs = match cached.filter(|fs| !fs.root_removed()) {
            Some(fs) => fs,
            None => {
                let fs = Arc::new(Beneath::open(self.layout.root())?);
                *opened() = Some(fs.clone());
                fs
            }
        };
        Ok(OpenFiles {
            fs,
            blanks: &self.blanks,
        })
    }

    /// Removes what writers killed mid-write left in kcsi's temp dir (at host start; the files
    /// of live processes, other hosts' writes in progress, stay).
    pub fn sweep_temp_dir(&self) -> Result<()> {
        sweep_temp_dir(self.layout.root())
    }
}

impl OpenFiles<'_> {
    /// `fs` with `blanks`, for the blank pool's tests.
    #[cfg(test)]
    pub(super) fn with_pool<'a>(fs: &Beneath, blanks: &'a Blanks) -> OpenFiles<'a> {
        OpenFiles {
            fs: Arc::new(fs.try_clone().unwrap()),
            blanks,
        }
    }

    /// The opened root, for checks and reads of paths below it.
    pub fn beneath(&self) -> &Beneath {
        &self.fs
    }

    /// Reads `<dir>/vol_data.json`. A missing file is `NotFound`; an empty or corrupt one is an
    /// I/O error naming the file.
    pub fn load(&self, dir: &Path) -> Result<VolumeData> {
        volume_data::load(&self.fs, dir)
    }

    /// Writes `<dir>/vol_data.json` durably and atomically through a temp file in kcsi's temp
    /// dir (one of the blanks when there is one ready), then removes stale temp files an older
    /// kcsi or the other-filesystem case left in `dir`.
    pub fn save(&self, dir: &Path, data: &VolumeData) -> Result<()> {
        self.save_then_sync(dir, data)?.wait()
    }

    /// [`OpenFiles::save`] up to the directory fsync, which the returned [`DirSync`] does: the
    /// file is in place, its content durable, when this returns (so a kubelet restarted
    /// meanwhile finds it), and the caller may sync the directory while it calls the driver.
    pub fn save_then_sync(&self, dir: &Path, data: &VolumeData) -> Result<DirSync> {
        let bytes = encode(data).into_bytes();
        stage(&self.fs, self.blanks.take(bytes.len()), dir, bytes)?.place(&self.fs)
    }

    /// Makes a volume's directories (`dir` and its missing parents) while its `vol_data.json`
    /// is [`stage`]d on a blocking thread: the file's fsync is most of a save's time and needs
    /// none of those directories. The file goes into one of the blanks when one is ready. Both
    /// outcomes are the caller's (who holds the volume's lock): a staged file is put in place
    /// with [`OpenFiles::place`], and removed if dropped unplaced.
    pub async fn make_dirs_and_stage(
        &self,
        dir: &Path,
        data: &VolumeData,
    ) -> (Result<()>, Result<Staged>) {
        let staging = self.fs.try_clone().map(|stager| {
            let bytes = encode(data).into_bytes();
            let (blank, dir) = (self.blanks.take(bytes.len()), dir.to_path_buf());
            tokio::task::spawn_blocking(move || stage(&stager, blank, &dir, bytes))
        });
        let made = self.make_dirs(dir);
        let staged = match staging {
            Ok(task) => task.await.unwrap_or_else(|e| {
                Err(Error::internal(format!(
                    "writing the volume data file panicked: {e}"
                )))
            }),
            Err(e) => Err(e),
        };
        let staged = match made {
            Ok(true) => staged.map(Staged::in_new_dir),
            _ => staged,
        };
        (made.map(|_| ()), staged)
    }

    /// Renames a [`OpenFiles::make_dirs_and_stage`]d file into place, as
    /// [`OpenFiles::save_then_sync`] returns.
    pub fn place(&self, staged: Staged) -> Result<DirSync> {
        staged.place(&self.fs)
    }

    /// Creates `dir` and missing parents with mode 0750, as the kubelet does. True when `dir`
    /// itself was made by this call.
    pub fn make_dirs(&self, dir: &Path) -> Result<bool> {
        self.fs.mkdir_all(dir, 0o750)
    }

    /// Whether `dir` exists and holds nothing but what an interrupted kcsi operation leaves once
    /// its `vol_data.json` is gone: kcsi's temp files, and (when `data_subdir` names one) a
    /// subdirectory holding only those. The file is written before anything is staged or published
    /// and removed only after the mount or staging dir, so such a volume needs no driver to remove;
    /// a mount dir still there means the file went missing some other way, and it is left alone.
    pub fn only_leftovers(&self, dir: &Path, data_subdir: Option<&str>) -> Result<bool> {
        let fs = &*self.fs;
        if fs.entry(dir)? != Entry::Dir {
            return Ok(false);
        }
        for name in fs.list(dir)? {
            if name.to_str().and_then(temp_file_pid).is_some() {
                continue;
            }
            let sub = dir.join(&name);
            let is_data_dir = data_subdir.is_some_and(|d| name == d);
            if !is_data_dir || !self.only_leftovers(&sub, None)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Upstream `removeMountDir`: unless `mount_path` is still mounted, removes it (only if empty),
    /// then kcsi's temp files and `<parent>/vol_data.json`, then the parent. A mounted path is left
    /// alone (not an error): removing it would lose the data needed to unmount it later. Each step
    /// tolerates what an interrupted earlier teardown already removed.
    pub fn remove_mount_dir(&self, mount_path: &Path) -> Result<()> {
        let fs = &*self.fs;
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
            Some(parent) => self.remove_volume_data_dir(parent),
            None => Ok(()),
        }
    }

    /// Removes kcsi's temp files and `vol_data.json` in `dir` (the file kept as a blank
    /// when there is room), then `dir` (which must then be empty).
    pub fn remove_volume_data_dir(&self, dir: &Path) -> Result<()> {
        let fs = &*self.fs;
        remove_temp_files(fs, dir, Writers::All)?;
        self.blanks.recycle(
            fs,
            &dir.join(FILE_NAME),
            "failed to delete volume data file",
        )?;
        fs.remove_dir(dir, "failed to delete volume path")
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::*;
    use crate::disk::temp_dir::temp_dir;
    use crate::disk::test_support::{names, umask, volume_dir};
    use crate::error::ErrorKind;

    #[test]
    fn the_root_is_opened_once_and_again_after_removal() {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::without_blanks(&dir.path().join("root"));
        let first = files.open().unwrap().fs;
        assert!(Arc::ptr_eq(&first, &files.open().unwrap().fs));
        assert!(Arc::ptr_eq(&first, &files.open().unwrap().fs));

        std::fs::remove_dir(dir.path().join("root")).unwrap();
        assert!(first.root_removed());
        let again = files.open().unwrap().fs;
        assert!(!Arc::ptr_eq(&first, &again));
        assert!(
            dir.path().join("root").is_dir(),
            "the root was not made again"
        );
        let probe = dir.path().join("root/probe");
        again.mkdir_all(&probe, 0o750).unwrap();
        assert!(
            probe.is_dir(),
            "a directory made through the new handle is not in the new root"
        );
    }

    #[test]
    fn make_dirs_makes_every_missing_level_0750_and_refuses_a_file_in_the_way() {
        use std::os::unix::fs::PermissionsExt;
        let (root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        let deep = dir.join("a/b/c");
        assert!(files.make_dirs(&deep).unwrap(), "made now");
        assert!(!files.make_dirs(&deep).unwrap(), "there already");
        for level in [dir.join("a"), dir.join("a/b"), deep.clone()] {
            let mode = fs::metadata(&level).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o750 & !umask(), "{}", level.display());
        }
        fs::write(dir.join("file"), "").unwrap();
        for blocked in [dir.join("file"), dir.join("file/x")] {
            let err = files.make_dirs(&blocked).unwrap_err();
            assert!(err.message().contains("failed to create dir"), "{err}");
        }
        assert_eq!(names(root.path()), vec!["v".to_string()]);
    }

    #[test]
    fn save_then_sync_has_the_whole_file_in_place_before_the_directory_sync() {
        let (_root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        let sync = files.save_then_sync(&dir, &data).unwrap();
        assert_eq!(files.load(&dir).unwrap(), data);
        assert_eq!(names(&dir), vec![FILE_NAME.to_string()]);
        sync.wait().unwrap();
    }

    #[test]
    fn save_then_load_round_trips_and_leaves_no_temp_file() {
        let (_root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        files.save(&dir, &data).unwrap();
        assert_eq!(files.load(&dir).unwrap(), data);
        assert_eq!(names(&dir), vec![FILE_NAME.to_string()]);
    }

    #[test]
    fn save_creates_the_file_0666_less_umask_as_go_os_create() {
        use std::os::unix::fs::PermissionsExt;
        let (_root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        files.save(&dir, &VolumeData::new()).unwrap();
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
        let (root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        files.save(&dir, &VolumeData::new()).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let tmp = temp_dir(root.path());
        assert_eq!(mode(&tmp), 0o700 & !umask());
        // The kubelet's own mode for it (upstream's plugin dir is made by os.MkdirAll 0750).
        assert_eq!(mode(tmp.parent().unwrap()), 0o750 & !umask());
    }

    #[test]
    fn save_and_teardown_remove_stale_temp_files_of_dead_writers() {
        let (_root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        // A killed kcsi (pid far above pid_max) left both temp name forms; a foreign file stays.
        for stale in [
            ".vol_data.json.999999999.tmp",
            ".vol_data.json.999999999.00ab.tmp",
        ] {
            fs::write(dir.join(stale), "{").unwrap();
        }
        fs::write(dir.join(".vol_data.json.1.tmp"), "{").unwrap();
        fs::write(dir.join("other"), "").unwrap();
        files.save(&dir, &VolumeData::new()).unwrap();
        // pid 1 is alive: its temp file is another writer's until teardown.
        assert_eq!(
            names(&dir),
            vec![".vol_data.json.1.tmp", "other", FILE_NAME]
        );
        fs::remove_file(dir.join("other")).unwrap();
        fs::create_dir(dir.join("mount")).unwrap();
        assert!(!files.only_leftovers(&dir, None).unwrap());
        files.remove_mount_dir(&dir.join("mount")).unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn leftovers_are_temp_files_and_a_data_dir_of_them_only() {
        let (_root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        assert!(files.only_leftovers(&dir, None).unwrap());
        fs::write(dir.join(".vol_data.json.999999999.1.tmp"), "").unwrap();
        assert!(files.only_leftovers(&dir, None).unwrap());
        fs::create_dir(dir.join("data")).unwrap();
        fs::write(dir.join("data/.vol_data.json.999999999.tmp"), "").unwrap();
        assert!(!files.only_leftovers(&dir, None).unwrap());
        assert!(files.only_leftovers(&dir, Some("data")).unwrap());
        // An empty mount dir may still be what a driver staged at: not a leftover.
        fs::create_dir(dir.join("mount")).unwrap();
        assert!(!files.only_leftovers(&dir, Some("data")).unwrap());
        assert!(!files.only_leftovers(&dir.join("missing"), None).unwrap());
    }

    #[test]
    fn symlinks_below_the_root_are_refused_not_followed() {
        let (root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        let via_link = root.path().join("link/v");
        let err = files.make_dirs(&via_link).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::FailedPrecondition, "{err}");
        assert!(
            err.message().contains(&format!(
                "{} is a symlink",
                root.path().join("link").display()
            )),
            "{err}"
        );
        assert!(files
            .save(&root.path().join("link"), &VolumeData::new())
            .is_err());
        fs::write(outside.path().join(FILE_NAME), "{}").unwrap();
        assert_eq!(
            files.load(&root.path().join("link")).unwrap_err().kind(),
            ErrorKind::FailedPrecondition
        );
        std::os::unix::fs::symlink(outside.path(), dir.join("mount")).unwrap();
        assert!(files.remove_mount_dir(&dir.join("mount")).is_err());
        assert!(files
            .beneath()
            .check_no_symlink(&dir.join("mount/x"), "NodePublish")
            .is_err());
        assert!(files
            .beneath()
            .check_no_symlink(&dir.join("new/x"), "NodePublish")
            .is_ok());
        assert_eq!(names(outside.path()), vec![FILE_NAME.to_string()]);
    }

    #[tokio::test]
    async fn make_dirs_and_stage_removes_the_staged_file_when_the_dirs_cannot_be_made() {
        let root = tempfile::tempdir().unwrap();
        let files = Files::without_blanks(root.path());
        let files = files.open().unwrap();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        let dir = root.path().join("pods/uid/volumes/kubernetes.io~csi/pv");
        let (made, staged) = files.make_dirs_and_stage(&dir, &data).await;
        made.unwrap();
        files.place(staged.unwrap()).unwrap().wait().unwrap();
        assert_eq!(files.load(&dir).unwrap(), data);

        std::fs::write(root.path().join("blocked"), "").unwrap();
        let (made, staged) = files
            .make_dirs_and_stage(&root.path().join("blocked/pv"), &data)
            .await;
        assert!(made.is_err());
        drop(staged);
        let tmp = temp_dir(root.path());
        assert_eq!(std::fs::read_dir(tmp).unwrap().count(), 0);
    }
}
