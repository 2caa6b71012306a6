//! Blanks: temp files for `vol_data.json` made durable ahead of need, a few per host, in kcsi's
//! temp dir. The save that MountDevice and SetUp wait for before calling the driver then writes
//! into one instead of making a new file, whose fsync also writes the temp dir's new entry, the
//! inode and a new block. Blanks are made the length of recent saves (a host's files mostly
//! repeat a few lengths: the same driver, handles and PV names of one form), so a save whose
//! length has a blank costs one data write (fdatasync, the inode's size unchanged), and any other
//! save a data and an inode write. Measured on an ext4 disk here: 0.13 and 0.2 ms, a new file
//! 0.33 ms. The pool is refilled in the background when saves pause, so a host that never saves
//! makes none; a host's own are removed when it is dropped, a dead process's are swept by the
//! next host, as its temp files are. A `vol_data.json` that a teardown is done with comes back
//! as a blank while the pool has room ([`Blanks::recycle`]): its blocks are written again by a
//! later save instead of freed now and a new file allocated and fsynced then.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::beneath::{Beneath, Entry};
use super::blank_file;
use super::temp_dir::{blank_name, temp_dir};
use super::volume_data::MAX_FILE_SIZE;
use crate::error::{Error, ErrorKind, Result};

/// Blanks kept ready: a kubelet's operations mostly come one or two at a time; a burst beyond
/// this takes new temp files until the pool catches up.
const READY: usize = 4;

/// Blanks held at most, recycled files included: room for a few teardowns' files beyond a
/// full pool, so those a refill was quicker to replace are kept rather than removed.
const HELD: usize = 4 * READY;

/// How long no save must have started before a blank is made.
const QUIET: Duration = Duration::from_millis(10);

/// A host's pool of blanks (none for a host that writes no volume data).
pub struct Blanks {
    pool: Option<Arc<Pool>>,
}

struct Pool {
    root: PathBuf,
    state: Mutex<State>,
    /// Saves started so far: a refill waits for a quiet moment.
    saves: AtomicU64,
    /// A refill is running: one at a time.
    refilling: AtomicBool,
}

#[derive(Default)]
struct State {
    ready: Vec<Made>,
    /// The lengths of the last [`READY`] saves, the latest last: the lengths to make.
    recent: VecDeque<usize>,
    /// The host is gone: blanks are removed, not kept.
    closed: bool,
    /// Making one failed: saves make new temp files from then on (logged once).
    failed: bool,
}

/// A blank: its path, the open file, its length (zeros, or a recycled file's old content).
pub struct Made {
    pub path: PathBuf,
    pub file: File,
    pub len: usize,
}

/// A blank taken from the pool for one save; back to the pool if dropped unused.
pub struct Blank {
    pool: Arc<Pool>,
    taken: Option<Made>,
}

impl Blanks {
    /// The pool of a host rooted at `root`, empty until the first [`Blanks::take`].
    pub fn new(root: &Path) -> Blanks {
        Blanks {
            pool: Some(Arc::new(Pool {
                root: root.to_path_buf(),
                state: Mutex::default(),
                saves: AtomicU64::new(0),
                refilling: AtomicBool::new(false),
            })),
        }
    }

    /// No pool: every save makes a new temp file.
    pub fn none() -> Blanks {
        Blanks { pool: None }
    }

    /// Removes `path`, a `vol_data.json` its volume is done with, as [`Beneath::remove_file`]
    /// does (`what` names the failure), or keeps it as a blank while the pool has room and it
    /// is a plain file kcsi could have written ([`blank_file::take`]): renamed into the temp
    /// dir, it is as a removed file for everything else.
    pub fn recycle(&self, fs: &Beneath, path: &Path, what: &str) -> Result<()> {
        if let Some(pool) = self.pool.as_ref().filter(|p| p.has_room()) {
            let tmp = temp_dir(fs.root_path()).join(blank_name());
            match blank_file::take(fs, path, &tmp, MAX_FILE_SIZE) {
                Ok(Some((file, len))) => {
                    pool.put(Made {
                        path: tmp,
                        file,
                        len: len as usize,
                    });
                    return Ok(());
                }
                Ok(None) => {}
                // The temp dir missing, another filesystem: removed instead, as before.
                Err(e) => tracing::debug!("{}", csi_log!("{e}; removing it instead")),
            }
        }
        fs.remove_file(path, what)
    }

    /// A ready blank for a save of `len` bytes starting now, if any: one of that length if
    /// there is one. The pool is refilled once saves pause.
    pub fn take(&self, len: usize) -> Option<Blank> {
        let pool = self.pool.as_ref()?;
        let taken = {
            let mut state = pool.state();
            if state.recent.len() == READY {
                state.recent.pop_front();
            }
            state.recent.push_back(len);
            let exact = state.ready.iter().rposition(|b| b.len == len);
            match exact {
                Some(i) => Some(state.ready.swap_remove(i)),
                None => state.ready.pop(),
            }
        };
        pool.refill_soon();
        taken.map(|b| Blank {
            pool: pool.clone(),
            taken: Some(b),
        })
    }
}

impl Drop for Blanks {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            let ready = {
                let mut state = pool.state();
                state.closed = true;
                std::mem::take(&mut state.ready)
            };
            pool.remove(ready);
        }
    }
}

impl Blank {
    /// The blank, now the caller's to fill or remove.
    pub fn into_made(mut self) -> Made {
        self.taken.take().expect("a blank is taken once")
    }
}

impl Drop for Blank {
    fn drop(&mut self) {
        if let Some(b) = self.taken.take() {
            self.pool.put(b);
        }
    }
}

impl Pool {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A recycled file may be kept.
    fn has_room(&self) -> bool {
        let state = self.state();
        !state.closed && state.ready.len() < HELD
    }

    fn put(&self, blank: Made) {
        let mut state = self.state();
        if state.closed {
            drop(state);
            self.remove(vec![blank]);
        } else {
            state.ready.push(blank);
        }
    }

    /// Counts a save starting, and has the pool refilled once no save has started for
    /// [`QUIET`] (by then the save is done, its driver call under way): making blanks does not
    /// share the disk with a save someone waits for, and a save that starts meanwhile stops the
    /// refill until the next quiet moment. A burst of saves makes new temp files once the pool
    /// is empty; the pool is refilled after it.
    fn refill_soon(self: &Arc<Self>) {
        self.saves.fetch_add(1, Ordering::AcqRel);
        if !self.short() || self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(handle) = crate::runtime::handle() else {
            self.refilling.store(false, Ordering::Release);
            return;
        };
        let pool = self.clone();
        handle.spawn(async move {
            loop {
                let dir_gone = pool.refill().await;
                pool.refilling.store(false, Ordering::Release);
                // A take between the last check and the store did not start a refill. Without
                // a temp dir the next save, which makes it, starts one.
                if dir_gone || !pool.short() || pool.refilling.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
        });
    }

    /// Makes blanks, each batch in a quiet moment, until the pool is full; true when it
    /// stopped because the temp dir is gone.
    async fn refill(self: &Arc<Self>) -> bool {
        while self.short() {
            let quiet = loop {
                let seen = self.saves.load(Ordering::Acquire);
                tokio::time::sleep(QUIET).await;
                if self.saves.load(Ordering::Acquire) == seen {
                    break seen;
                }
            };
            let maker = self.clone();
            let made = tokio::task::spawn_blocking(move || maker.make_while_quiet(quiet))
                .await
                .unwrap_or_else(|e| Err(Error::internal(format!("making a blank panicked: {e}"))));
            match made {
                Ok(true) => {}
                Ok(false) => return true,
                Err(e) => {
                    let mut state = self.state();
                    if state.closed {
                        return false;
                    }
                    state.failed = true;
                    drop(state);
                    tracing::warn!(
                        "{}",
                        csi_log!(
                            "{e}; vol_data.json is written through new temp files from now on"
                        )
                    );
                }
            }
        }
        false
    }

    /// The length of the next blank to make, while the pool is short: of the recent saves'
    /// lengths, the one with the most saves beyond the blanks of that length ready (the latest
    /// on a tie).
    fn len_to_make(&self) -> Option<usize> {
        let state = self.state();
        if state.closed || state.failed || state.ready.len() >= READY {
            return None;
        }
        // max_by_key keeps the last of equal keys: the latest.
        state.recent.iter().copied().max_by_key(|&len| {
            let wanted = state.recent.iter().filter(|&&l| l == len).count();
            let ready = state.ready.iter().filter(|b| b.len == len).count();
            wanted.saturating_sub(ready)
        })
    }

    /// Fewer than [`READY`] blanks, and more may be made.
    fn short(&self) -> bool {
        self.len_to_make().is_some()
    }

    /// Makes blanks while the pool is short and the save count is still `quiet`; false when
    /// the temp dir is gone.
    fn make_while_quiet(&self, quiet: u64) -> Result<bool> {
        // Nothing for a host dropped meanwhile, and never a dir: a refill runs behind a save,
        // which made the temp dir, and must not bring back one removed since (by whoever
        // removes the kubelet's dirs, or with a root removed with its host).
        if self.len_to_make().is_none() {
            return Ok(true);
        }
        let fs = Beneath::open_existing(&self.root)?;
        let dir = temp_dir(&self.root);
        if fs.entry(&dir)? == Entry::Missing {
            return Ok(false);
        }
        while self.saves.load(Ordering::Acquire) == quiet {
            let Some(len) = self.len_to_make() else {
                break;
            };
            let path = dir.join(blank_name());
            let file = blank_file::make(&fs, &path, len)?;
            self.put(Made { path, file, len });
        }
        Ok(true)
    }

    fn remove(&self, blanks: Vec<Made>) {
        if blanks.is_empty() {
            return;
        }
        // A root removed already took the blanks with it.
        let removed = Beneath::open_existing(&self.root).and_then(|fs| {
            blanks.iter().try_for_each(|b| {
                fs.remove_file(&b.path, "failed to remove a blank volume data file")
            })
        });
        match removed {
            Err(e) if e.kind() != ErrorKind::NotFound => tracing::warn!("{}", csi_log!("{e}")),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::disk::files::OpenFiles;
    use crate::disk::temp_dir::make_temp_dir;
    use crate::disk::test_support::{names, umask};
    use crate::disk::volume_data::{self, VolumeData, FILE_NAME};

    fn ready(blanks: &Blanks) -> usize {
        blanks.pool.as_ref().unwrap().state().ready.len()
    }

    /// Waits until the background refill has made `n` blanks ready.
    fn wait_ready(blanks: &Blanks, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while ready(blanks) < n {
            assert!(
                Instant::now() < deadline,
                "{} of {n} blanks ready",
                ready(blanks)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The length of `data`'s file.
    fn file_len(data: &VolumeData) -> usize {
        volume_data::encode(data).len()
    }

    fn data(len: usize) -> VolumeData {
        [("volumeHandle".to_string(), "v".repeat(len))]
            .into_iter()
            .collect()
    }

    /// A pool under a new root, filled after a save of `data(10)`'s length.
    fn filled() -> (tempfile::TempDir, Beneath, Blanks) {
        let root = tempfile::tempdir().unwrap();
        let fs = Beneath::open(root.path()).unwrap();
        let blanks = Blanks::new(root.path());
        // As the save that takes a blank makes the temp dir when there is none.
        make_temp_dir(&fs).unwrap();
        assert!(
            blanks.take(file_len(&data(10))).is_none(),
            "a new pool is empty"
        );
        wait_ready(&blanks, READY);
        (root, fs, blanks)
    }

    #[test]
    fn a_refill_makes_no_dir_and_stops_when_the_temp_dir_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let blanks = Blanks::new(root.path());
        assert!(blanks.take(file_len(&data(10))).is_none());
        // Well past the quiet moment the refill waits for.
        std::thread::sleep(QUIET * 20);
        assert!(!temp_dir(root.path()).exists());
        assert!(
            !root.path().join("plugins").exists(),
            "no parent made either"
        );
        assert_eq!(ready(&blanks), 0);
        assert!(
            !blanks
                .pool
                .as_ref()
                .unwrap()
                .refilling
                .load(Ordering::Acquire),
            "the refill stopped rather than waiting on for a dir"
        );

        // The next save makes the dir again, and the refill after it fills the pool.
        make_temp_dir(&Beneath::open(root.path()).unwrap()).unwrap();
        assert!(blanks.take(file_len(&data(10))).is_none());
        wait_ready(&blanks, READY);
    }

    fn in_temp_dir(root: &Path, suffix: &str) -> Vec<String> {
        names(&temp_dir(root))
            .into_iter()
            .filter(|n| n.ends_with(suffix))
            .collect()
    }

    fn inodes(root: &Path) -> Vec<u64> {
        in_temp_dir(root, ".blank")
            .iter()
            .map(|n| std::fs::metadata(temp_dir(root).join(n)).unwrap().ino())
            .collect()
    }

    /// Saves `data` in a new dir `v/<n>` through `blanks`: the file placed is one of the
    /// blanks, holding exactly `data`'s file, mode 0666 less the umask.
    fn save_through_a_blank(
        root: &Path,
        fs: &Beneath,
        blanks: &Blanks,
        n: usize,
        data: &VolumeData,
    ) {
        let blank_inodes = inodes(root);
        let dir = root.join("v").join(n.to_string());
        OpenFiles::with_pool(fs, &Blanks::none())
            .make_dirs(&dir)
            .unwrap();
        OpenFiles::with_pool(fs, blanks).save(&dir, data).unwrap();
        assert_eq!(&volume_data::load(fs, &dir).unwrap(), data);
        let placed = std::fs::metadata(dir.join(FILE_NAME)).unwrap();
        assert!(
            blank_inodes.contains(&placed.ino()),
            "written through a blank"
        );
        assert_eq!(placed.len(), file_len(data) as u64);
        assert_eq!(placed.mode() & 0o777, 0o666 & !umask());
        assert!(in_temp_dir(root, ".tmp").is_empty());
    }

    #[test]
    fn the_first_take_finds_none_and_fills_the_pool_with_zeroed_blanks_of_its_length() {
        let (root, _fs, _blanks) = filled();
        let made = in_temp_dir(root.path(), ".blank");
        assert_eq!(made.len(), READY, "{made:?}");
        let prefix = format!(".{FILE_NAME}.{}.", std::process::id());
        for name in made {
            assert!(name.starts_with(&prefix), "{name}");
            let path = temp_dir(root.path()).join(&name);
            assert_eq!(std::fs::read(&path).unwrap(), vec![0; file_len(&data(10))]);
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o666 & !umask(), "{name}");
        }
    }

    #[test]
    fn a_save_of_a_blanks_length_places_that_blank() {
        let (root, fs, blanks) = filled();
        save_through_a_blank(root.path(), &fs, &blanks, 0, &data(10));
    }

    #[test]
    fn saves_longer_and_shorter_than_the_blanks_are_written_whole() {
        let (root, fs, blanks) = filled();
        save_through_a_blank(root.path(), &fs, &blanks, 0, &data(5000));
        save_through_a_blank(root.path(), &fs, &blanks, 1, &data(1));
    }

    #[test]
    fn the_pool_makes_blanks_of_the_lengths_of_the_last_saves() {
        let root = tempfile::tempdir().unwrap();
        make_temp_dir(&Beneath::open(root.path()).unwrap()).unwrap();
        let blanks = Blanks::new(root.path());
        for len in [7, 100, 200, 100, 200] {
            drop(blanks.take(len));
        }
        wait_ready(&blanks, READY);
        let mut lens: Vec<usize> = blanks
            .pool
            .as_ref()
            .unwrap()
            .state()
            .ready
            .iter()
            .map(|b| b.len)
            .collect();
        lens.sort();
        assert_eq!(lens, vec![100, 100, 200, 200]);
        let blank = blanks.take(200).unwrap();
        assert_eq!(
            blank.taken.as_ref().unwrap().len,
            200,
            "one of the length asked for"
        );
    }

    /// A blank out of a filled pool, and the pool full again.
    fn take_and_refill(blanks: &Blanks) -> Blank {
        let blank = blanks.take(file_len(&data(10))).unwrap();
        wait_ready(blanks, READY);
        blank
    }

    #[test]
    fn an_unused_blank_goes_back_to_the_pool() {
        let (_root, _fs, blanks) = filled();
        let blank = take_and_refill(&blanks);
        drop(blank);
        assert_eq!(ready(&blanks), READY + 1);
    }

    #[test]
    fn a_dropped_pool_removes_its_blanks_and_a_blank_out_at_the_time() {
        let (root, _fs, blanks) = filled();
        let out = take_and_refill(&blanks);
        drop(blanks);
        assert_eq!(in_temp_dir(root.path(), ".blank").len(), 1, "the one out");
        drop(out);
        assert!(in_temp_dir(root.path(), ".blank").is_empty());
    }

    #[test]
    fn a_refill_never_makes_a_removed_root_again() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let blanks = Blanks::new(&root);
        let pool = blanks.pool.clone().unwrap();
        // A save's length, so the pool is short, without a take starting a refill.
        pool.state().recent.push_back(1);
        std::fs::remove_dir(&root).unwrap();
        let quiet = pool.saves.load(Ordering::Acquire);

        let err = pool.make_while_quiet(quiet).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(!root.exists(), "a live pool's refill made the root again");

        drop(blanks);
        pool.make_while_quiet(quiet).unwrap();
        assert!(
            !root.exists(),
            "a dropped pool's refill made the root again"
        );
    }

    #[test]
    fn a_pool_that_cannot_make_blanks_stops_and_saves_still_work() {
        let root = tempfile::tempdir().unwrap();
        let fs = Beneath::open(root.path()).unwrap();
        // A file where the temp dir goes: no blank can be made (and saves write beside).
        let tmp = temp_dir(root.path());
        std::fs::create_dir_all(tmp.parent().unwrap()).unwrap();
        std::fs::write(&tmp, "").unwrap();
        let blanks = Blanks::new(root.path());
        assert!(blanks.take(1).is_none());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !blanks.pool.as_ref().unwrap().state().failed {
            assert!(Instant::now() < deadline, "the refill never failed");
            std::thread::sleep(Duration::from_millis(5));
        }
        let dir = root.path().join("v");
        OpenFiles::with_pool(&fs, &Blanks::none())
            .make_dirs(&dir)
            .unwrap();
        OpenFiles::with_pool(&fs, &blanks)
            .save(&dir, &data(1))
            .unwrap();
        assert_eq!(volume_data::load(&fs, &dir).unwrap(), data(1));
        assert!(!blanks
            .pool
            .as_ref()
            .unwrap()
            .refilling
            .load(Ordering::Acquire));
        assert_eq!(ready(&blanks), 0);
    }

    fn ino(blank: &Blank) -> u64 {
        blank.taken.as_ref().unwrap().file.metadata().unwrap().ino()
    }

    /// Puts something at a `vol_data.json` path.
    type MakeFile<'a> = Box<dyn Fn(&Path) + 'a>;

    /// A dir under `root` holding a `vol_data.json` that `make` puts there.
    fn dir_with_file(root: &Path, name: &str, make: impl FnOnce(&Path)) -> PathBuf {
        let dir = root.join("v").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        make(&dir.join(FILE_NAME));
        dir
    }

    #[test]
    fn a_removed_volume_data_file_is_kept_as_a_blank_and_a_later_save_places_it() {
        let (root, fs, blanks) = filled();
        let old = root.path().join("v").join("old");
        OpenFiles::with_pool(&fs, &Blanks::none())
            .make_dirs(&old)
            .unwrap();
        OpenFiles::with_pool(&fs, &blanks)
            .save(&old, &data(10))
            .unwrap();
        let kept = std::fs::metadata(old.join(FILE_NAME)).unwrap().ino();
        OpenFiles::with_pool(&fs, &blanks)
            .remove_volume_data_dir(&old)
            .unwrap();
        assert!(!old.exists(), "the volume's dir is removed");
        assert!(
            inodes(root.path()).contains(&kept),
            "the file is kept as a blank"
        );

        // Taken by a save (the others taken meanwhile go back), it holds the new content alone.
        let len = file_len(&data(10));
        let mut others = Vec::new();
        let blank = loop {
            let b = blanks.take(len).expect("the kept file is in the pool");
            if ino(&b) == kept {
                break b;
            }
            others.push(b);
        };
        let new = root.path().join("v").join("new");
        OpenFiles::with_pool(&fs, &Blanks::none())
            .make_dirs(&new)
            .unwrap();
        let bytes = volume_data::encode(&data(1)).into_bytes();
        let staged = crate::disk::save::stage(&fs, Some(blank), &new, bytes).unwrap();
        staged.place(&fs).unwrap().wait().unwrap();
        let placed = std::fs::metadata(new.join(FILE_NAME)).unwrap();
        assert_eq!(placed.ino(), kept);
        assert_eq!(placed.len(), file_len(&data(1)) as u64);
        assert_eq!(volume_data::load(&fs, &new).unwrap(), data(1));
    }

    #[test]
    fn only_a_plain_volume_data_file_is_kept_anything_else_is_removed_untouched() {
        let (root, fs, blanks) = filled();
        let r = root.path();
        let other = r.join("other");
        std::fs::write(&other, "theirs").unwrap();
        let write = |p: &Path| std::fs::write(p, "{}").unwrap();
        let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        let cases: Vec<(&str, MakeFile)> = vec![
            (
                "a hard link",
                Box::new(|p| std::fs::hard_link(&other, p).unwrap()),
            ),
            (
                "a symlink",
                Box::new(|p| std::os::unix::fs::symlink(&other, p).unwrap()),
            ),
            (
                "a FIFO",
                Box::new(|p| {
                    let fifo = rustix::fs::FileType::Fifo;
                    let m = rustix::fs::Mode::from_raw_mode(0o644);
                    rustix::fs::mknodat(rustix::fs::CWD, p, fifo, m, 0).unwrap()
                }),
            ),
            (
                "an executable",
                Box::new(move |p| (write(p), mode(p, 0o755).unwrap()).1),
            ),
            (
                "a setuid file",
                Box::new(move |p| (write(p), mode(p, 0o4644).unwrap()).1),
            ),
            (
                "another user's file",
                Box::new(move |p| {
                    (
                        write(p),
                        std::os::unix::fs::chown(p, Some(65534), None).unwrap(),
                    )
                        .1
                }),
            ),
            (
                "a file too long to be volume data",
                Box::new(|p| std::fs::write(p, vec![b' '; MAX_FILE_SIZE as usize + 1]).unwrap()),
            ),
        ];
        let blanks_before = inodes(r);
        for (what, make) in cases {
            let dir = dir_with_file(r, what, make);
            OpenFiles::with_pool(&fs, &blanks)
                .remove_volume_data_dir(&dir)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(!dir.exists(), "{what}: the volume's dir is removed");
            assert_eq!(inodes(r), blanks_before, "{what}: nothing is kept");
        }
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "theirs");
        assert_eq!(std::fs::metadata(&other).unwrap().nlink(), 1);
        // The same pool keeps a plain file: the ones above were refused, not crowded out.
        let dir = dir_with_file(r, "plain", write);
        let plain = std::fs::metadata(dir.join(FILE_NAME)).unwrap().ino();
        OpenFiles::with_pool(&fs, &blanks)
            .remove_volume_data_dir(&dir)
            .unwrap();
        assert!(inodes(r).contains(&plain), "a plain file is kept");
    }

    #[test]
    fn a_pool_holding_its_most_removes_a_volume_data_file() {
        let (root, fs, blanks) = filled();
        for i in 0..=HELD - READY {
            let dir = dir_with_file(root.path(), &i.to_string(), |p| {
                std::fs::write(p, "{}").unwrap()
            });
            OpenFiles::with_pool(&fs, &blanks)
                .remove_volume_data_dir(&dir)
                .unwrap();
            assert!(!dir.exists());
        }
        assert_eq!(ready(&blanks), HELD);
        assert_eq!(
            inodes(root.path()).len(),
            HELD,
            "the last file is removed, not kept"
        );
    }

    #[test]
    fn a_host_without_a_pool_removes_a_volume_data_file() {
        let root = tempfile::tempdir().unwrap();
        let fs = Beneath::open(root.path()).unwrap();
        let dir = dir_with_file(root.path(), "v", |p| std::fs::write(p, "{}").unwrap());
        OpenFiles::with_pool(&fs, &Blanks::none())
            .remove_volume_data_dir(&dir)
            .unwrap();
        assert!(!dir.exists());
        assert!(!temp_dir(root.path()).exists(), "no blank is kept");
    }
}
