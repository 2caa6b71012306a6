//! File operations confined to the host's root directory. Every path below the root is resolved
//! with libpathrs (openat2 `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS`, or its safe emulation), so a
//! symlink planted anywhere below the root — or swapped in between two calls — is refused
//! instead of followed, and nothing outside the root is created, written or removed. The root
//! itself is the host's to choose and may be reached through symlinks.

use std::ffi::OsString;
use std::fs::{File, Permissions};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use pathrs::error::ErrorKind as PathrsKind;
use pathrs::flags::{OpenFlags, RenameFlags, ResolverFlags};
use pathrs::{InodeType, Root};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Result};

/// The host's root directory, opened for confined operations on absolute paths below it.
pub struct Beneath {
    root_path: PathBuf,
    pub(super) root: Root,
}

impl std::fmt::Debug for Beneath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Beneath")
            .field("root", &self.root_path)
            .finish()
    }
}

/// Whether an entry exists, and what it is (never following a final symlink).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Missing,
    Dir,
    File,
    Other,
}

impl Beneath {
    /// Opens `root`, creating it (mode 0750) when it does not exist yet.
    pub fn open(root: &Path) -> Result<Beneath> {
        match Beneath::open_existing(root) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o750)
                    .create(root)
                    .map_err(|e| Beneath::open_failed(root, &e))?;
                Beneath::open_existing(root)
            }
            other => other,
        }
    }

    /// Opens `root` if it exists; a missing one is NOT_FOUND.
    pub fn open_existing(root: &Path) -> Result<Beneath> {
        match Root::open(root) {
            Ok(root_dir) => Ok(Beneath {
                root_path: root.to_path_buf(),
                root: root_dir.with_resolver_flags(ResolverFlags::NO_SYMLINKS),
            }),
            Err(e) => {
                let failed = Beneath::open_failed(root, &os_error(&e));
                Err(if errno(&e) == Some(libc::ENOENT) {
                    failed.with_kind(ErrorKind::NotFound)
                } else {
                    failed
                })
            }
        }
    }

    fn open_failed(root: &Path, e: &std::io::Error) -> Error {
        Error::io(format!("cannot open root directory {}", root.display()), e)
    }

    /// Whether the directory opened as the root has been removed since (an unreadable one
    /// counts as removed, to be opened again).
    pub fn root_removed(&self) -> bool {
        rustix::fs::fstat(&self.root).map_or(true, |st| st.st_nlink == 0)
    }

    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// `path` relative to the root; a path that is not a plain path below it is refused.
    pub(super) fn rel<'p>(&self, path: &'p Path) -> Result<&'p Path> {
        let rel = path.strip_prefix(&self.root_path).map_err(|_| {
            Error::invalid(format!(
                "{} is not below the root directory {}",
                path.display(),
                self.root_path.display()
            ))
        })?;
        if rel.as_os_str().is_empty()
            || !rel.components().all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(Error::invalid(format!(
                "{} is not a plain path below the root directory {}",
                path.display(),
                self.root_path.display()
            )));
        }
        Ok(rel)
    }

    /// The kcsi error for a failed `what` on `path`: a symlink (or a swap libpathrs detected) is
    /// FAILED_PRECONDITION naming the link; a missing entry NOT_FOUND; the rest IO.
    pub(super) fn error(&self, what: &str, path: &Path, e: &pathrs::error::Error) -> Error {
        if errno(e) == Some(libc::ELOOP) || e.kind() == PathrsKind::SafetyViolation {
            return self.symlink_refusal(what, path);
        }
        let err = Error::io(format!("{what} [{}]", path.display()), &os_error(e));
        if errno(e) == Some(libc::ENOENT) {
            err.with_kind(ErrorKind::NotFound)
        } else {
            err
        }
    }

    fn symlink_refusal(&self, what: &str, path: &Path) -> Error {
        let link = self.first_symlink(path);
        let found = match &link {
            Some(l) => format!("{} is a symlink", l.display()),
            None => "a path component changed while it was resolved".to_string(),
        };
        Error::new(
            ErrorKind::FailedPrecondition,
            format!(
                "{what} [{}]: refused, {found}; kcsi follows no symlink below its root directory {}",
                path.display(),
                self.root_path.display()
            ),
        )
    }

    /// The first component of `path` below the root that is a symlink (for messages only).
    fn first_symlink(&self, path: &Path) -> Option<PathBuf> {
        let rel = path.strip_prefix(&self.root_path).ok()?;
        let mut at = self.root_path.clone();
        for c in rel.components() {
            at.push(c);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => return Some(at),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// Creates `dir` and its missing parents with `mode` (less the umask). True when `dir`
    /// itself was made by this call (false when it was there, or the general walk made it).
    pub fn mkdir_all(&self, dir: &Path, mode: u32) -> Result<bool> {
        let rel = self.rel(dir)?;
        let perm = Permissions::from_mode(mode);
        match self.mkdir_missing(rel, &perm) {
            Some(made) => Ok(made),
            None => {
                self.root
                    .mkdir_all(rel, &perm)
                    .map_err(|e| self.error("failed to create dir", dir, &e))?;
                Ok(false)
            }
        }
    }

    /// `mkdir_all`'s common case in one openat2 per level and a mkdirat per missing one, where
    /// pathrs' general walk checks every step through procfs: finds the deepest existing dir
    /// and makes each level below it (true when there was one to make). `None` for anything
    /// else (a non-dir in the way, a concurrent creation, any error): the general walk then
    /// decides.
    fn mkdir_missing(&self, rel: &Path, perm: &Permissions) -> Option<bool> {
        let mut missing = Vec::new();
        let mut at = rel;
        while !at.as_os_str().is_empty() {
            match self.probe(at, OFlags::DIRECTORY) {
                Some(Ok(_)) => break,
                Some(Err(Errno::NOENT)) => missing.push(at),
                _ => return None,
            }
            at = at.parent()?;
        }
        let made = !missing.is_empty();
        for level in missing.into_iter().rev() {
            self.root
                .create(level, &InodeType::Directory(perm.clone()))
                .ok()?;
        }
        Some(made)
    }

    /// An `O_PATH` lookup of `rel` with pathrs' own openat2 resolution (`RESOLVE_IN_ROOT`,
    /// no symlinks, no magic links), for lookups that often miss: pathrs describes every failed
    /// lookup's directory through a procfs readlink, five system calls kcsi would spend on
    /// each missing level of a new volume's directories. `None` when openat2 cannot answer
    /// (an old kernel, a racing rename's EAGAIN): pathrs then resolves, as everywhere else.
    pub(super) fn probe(&self, rel: &Path, flags: OFlags) -> Option<rustix::io::Result<OwnedFd>> {
        self.open_in_root(rel, flags | OFlags::PATH)
    }

    /// `rel` opened with `flags` by that same openat2 resolution, `None` as for [`Beneath::probe`].
    pub(super) fn open_in_root(
        &self,
        rel: &Path,
        flags: OFlags,
    ) -> Option<rustix::io::Result<OwnedFd>> {
        let resolve =
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_SYMLINKS;
        match rustix::fs::openat2(
            &self.root,
            rel,
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            resolve,
        ) {
            Err(Errno::NOSYS | Errno::AGAIN | Errno::INVAL) => None,
            other => Some(other),
        }
    }

    /// What is at `path`, without following it; a symlink there or above is refused.
    pub fn entry(&self, path: &Path) -> Result<Entry> {
        let rel = self.rel(path)?;
        let handle: OwnedFd = match self.probe(rel, OFlags::NOFOLLOW) {
            Some(Ok(fd)) => fd,
            Some(Err(Errno::NOENT)) => return Ok(Entry::Missing),
            // The rest (a symlink, no openat2) is pathrs' to resolve and describe.
            _ => match self.root.resolve_nofollow(rel) {
                Ok(h) => h.into(),
                Err(e) if errno(&e) == Some(libc::ENOENT) => return Ok(Entry::Missing),
                Err(e) => return Err(self.error("cannot inspect", path, &e)),
            },
        };
        let stat = rustix::fs::fstat(&handle)
            .map_err(|e| Error::io(format!("cannot inspect [{}]", path.display()), &e.into()))?;
        Ok(match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Entry::Dir,
            FileType::RegularFile => Entry::File,
            FileType::Symlink => return Err(self.symlink_refusal("cannot inspect", path)),
            _ => Entry::Other,
        })
    }

    /// Refuses `path` when it, or the part of it that exists, has a symlink component: checked
    /// right before a path goes to the driver, which resolves it itself.
    pub fn check_no_symlink(&self, path: &Path, what: &str) -> Result<()> {
        let mut at = path;
        loop {
            match self.entry(at) {
                Ok(Entry::Missing) => match at.parent() {
                    Some(parent) if parent != self.root_path => at = parent,
                    _ => return Ok(()),
                },
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::FailedPrecondition => {
                    return Err(self.symlink_refusal(what, path))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads the regular file at `path`, refusing more than `limit` bytes; a missing file is
    /// NOT_FOUND. Anything else there (a FIFO that would block, a device) is refused unopened.
    pub fn read_to_string(&self, path: &Path, what: &str, limit: u64) -> Result<String> {
        let rel = self.rel(path)?;
        let io = |e: std::io::Error| Error::io(format!("{what} [{}]", path.display()), &e);
        let not_regular = || {
            Error::new(
                ErrorKind::Io,
                format!("{what} [{}]: not a regular file", path.display()),
            )
        };
        let (file, size) = match self.open_regular(rel) {
            Some(Ok(Some(opened))) => opened,
            Some(Ok(None)) => return Err(not_regular()),
            Some(Err(e)) => return Err(io(e.into()).with_kind(ErrorKind::NotFound)),
            None => {
                let handle = self
                    .root
                    .resolve(rel)
                    .map_err(|e| self.error(what, path, &e))?;
                let stat = rustix::fs::fstat(&handle).map_err(|e| io(e.into()))?;
                if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                    return Err(not_regular());
                }
                let file = handle
                    .reopen(OpenFlags::O_RDONLY | OpenFlags::O_CLOEXEC)
                    .map_err(|e| self.error(what, path, &e))?;
                (file, stat.st_size as u64)
            }
        };
        let mut text = String::with_capacity(size.min(limit) as usize + 1);
        file.take(limit + 1).read_to_string(&mut text).map_err(io)?;
        if text.len() as u64 > limit {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{what} [{}]: larger than {limit} bytes", path.display()),
            ));
        }
        Ok(text)
    }

    /// `read_to_string`'s common case: an `O_PATH` [`Beneath::probe`] to see that `rel` is a
    /// regular file, then a second openat2 of it for reading, checked to be the same inode.
    /// pathrs reopens a resolved handle through procfs, some forty system calls that each
    /// teardown would spend on its `vol_data.json`. `Some(Ok(None))`: not a regular file;
    /// `Some(Err)`: only ENOENT; `None`: for pathrs to resolve and describe (a symlink, no
    /// openat2, a swap between the two opens).
    fn open_regular(&self, rel: &Path) -> Option<rustix::io::Result<Option<(File, u64)>>> {
        let handle = match self.probe(rel, OFlags::NOFOLLOW)? {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Some(Err(Errno::NOENT)),
            Err(_) => return None,
        };
        let probed = rustix::fs::fstat(&handle).ok()?;
        match FileType::from_raw_mode(probed.st_mode) {
            FileType::RegularFile => {}
            // O_PATH | O_NOFOLLOW opened the link itself: pathrs' refusal names it.
            FileType::Symlink => return None,
            _ => return Some(Ok(None)),
        }
        // NONBLOCK and NOCTTY: should a FIFO or device be swapped in after the probe, opening
        // it neither blocks nor takes a terminal, and the inode check leaves it to pathrs,
        // which refuses it as not a regular file.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.open_in_root(rel, flags)?.ok()?;
        let opened = rustix::fs::fstat(&fd).ok()?;
        if (opened.st_dev, opened.st_ino) != (probed.st_dev, probed.st_ino) {
            return None;
        }
        Some(Ok(Some((File::from(fd), opened.st_size as u64))))
    }

    /// A second handle on the same root, for work on another thread.
    pub fn try_clone(&self) -> Result<Beneath> {
        let root = self.root.try_clone().map_err(|e| {
            Error::io(
                format!("cannot reopen root directory {}", self.root_path.display()),
                &os_error(&e),
            )
        })?;
        Ok(Beneath {
            root_path: self.root_path.clone(),
            root,
        })
    }

    /// Writes `dir/name` atomically through the new temp file `tmp_dir/tmp_name`: a
    /// [`Beneath::write_temp`] and its [`TempFile::place`].
    pub fn write_atomic(
        &self,
        dir: &Path,
        name: &str,
        tmp_dir: &Path,
        tmp_name: &str,
        bytes: &[u8],
    ) -> Result<DirSync> {
        self.write_temp(&dir.join(name), tmp_dir, tmp_name, bytes)?
            .place()
    }

    /// Writes `bytes` to the new temp file `tmp_dir/tmp_name` and fsyncs it, for
    /// [`TempFile::place`] to rename to `path` (which messages name).
    pub fn write_temp(
        &self,
        path: &Path,
        tmp_dir: &Path,
        tmp_name: &str,
        bytes: &[u8],
    ) -> Result<TempFile> {
        let tmp = tmp_dir.join(tmp_name);
        let fs = self.try_clone()?;
        let mut f = self.create_exclusive(&tmp, path)?;
        let temp = TempFile::new(fs, tmp, path, bytes);
        let io = |e: std::io::Error| Error::io(format!("{SAVE_FAILED} [{}]", path.display()), &e);
        f.write_all(bytes).map_err(io)?;
        // Before the rename: a crash must never leave an empty file at `path`.
        f.sync_all().map_err(io)?;
        Ok(temp)
    }

    /// Creates the new file `tmp` exclusively, mode 0666 less the umask (Go's `os.Create`);
    /// messages name `path`, the file it is written for.
    pub(super) fn create_exclusive(&self, tmp: &Path, path: &Path) -> Result<File> {
        let flags =
            OpenFlags::O_WRONLY | OpenFlags::O_CREAT | OpenFlags::O_EXCL | OpenFlags::O_CLOEXEC;
        self.root
            .create_file(self.rel(tmp)?, flags, &Permissions::from_mode(0o666))
            .map_err(|e| self.error(SAVE_FAILED, path, &e))
    }

    /// Removes the file at `path`; a missing one is fine.
    pub fn remove_file(&self, path: &Path, what: &str) -> Result<()> {
        let rel = self.rel(path)?;
        match self.root.remove_file(rel) {
            Ok(()) => Ok(()),
            Err(e) if errno(&e) == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(self.error(what, path, &e)),
        }
    }

    /// Removes the empty directory at `path` (or a file the driver left there); a missing one
    /// is fine. A symlink there is refused, not removed.
    pub fn remove_dir(&self, path: &Path, what: &str) -> Result<()> {
        self.remove_entry(path, self.entry(path)?, what)
    }

    /// [`Beneath::remove_dir`] of an `entry` the caller just looked up.
    pub fn remove_entry(&self, path: &Path, entry: Entry, what: &str) -> Result<()> {
        match entry {
            Entry::Missing => Ok(()),
            Entry::Dir => match self.root.remove_dir(self.rel(path)?) {
                Ok(()) => Ok(()),
                Err(e) if errno(&e) == Some(libc::ENOENT) => Ok(()),
                Err(e) => Err(self.error(what, path, &e)),
            },
            Entry::File | Entry::Other => self.remove_file(path, what),
        }
    }

    /// The names in directory `dir`; a missing directory has none.
    pub fn list(&self, dir: &Path) -> Result<Vec<OsString>> {
        let rel = self.rel(dir)?;
        let what = "cannot read directory";
        let fd: OwnedFd = match self.open_in_root(rel, OFlags::RDONLY | OFlags::DIRECTORY) {
            Some(Ok(fd)) => fd,
            Some(Err(Errno::NOENT)) => return Ok(Vec::new()),
            _ => match self.root.open_subpath(
                rel,
                OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY | OpenFlags::O_CLOEXEC,
            ) {
                Ok(f) => f.into(),
                Err(e) if errno(&e) == Some(libc::ENOENT) => return Ok(Vec::new()),
                Err(e) => return Err(self.error(what, dir, &e)),
            },
        };
        let io = |e: rustix::io::Errno| Error::io(format!("{what} [{}]", dir.display()), &e.into());
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::new(fd).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        }
        Ok(names)
    }

    /// `RemoveAllOneFilesystem`: removes `path` and everything below it, refusing (before
    /// removing anything under it) any entry that is a mount point, and any symlink.
    pub fn remove_all_one_filesystem(&self, path: &Path) -> Result<()> {
        let entry = self.entry(path)?;
        if entry == Entry::Missing {
            return Ok(());
        }
        if super::mounts::is_mount_point(path)? {
            return Err(Error::new(
                ErrorKind::Io,
                csi_log!("refusing to remove {}: it is a mount point", path.display()),
            ));
        }
        if entry == Entry::Dir {
            for name in self.list(path)? {
                self.remove_all_one_filesystem(&path.join(name))?;
            }
        }
        self.remove_dir(path, "cannot remove")
    }
}

pub(super) const SAVE_FAILED: &str = "failed to save volume data file";

/// A file's whole content, durable under a temp name ([`Beneath::write_temp`]) and not yet in
/// place; removed when dropped unplaced.
pub struct TempFile {
    fs: Beneath,
    tmp: PathBuf,
    path: PathBuf,
    bytes: Vec<u8>,
    placed: bool,
}

impl TempFile {
    pub(super) fn new(fs: Beneath, tmp: PathBuf, path: &Path, bytes: &[u8]) -> TempFile {
        TempFile {
            fs,
            tmp,
            path: path.to_path_buf(),
            bytes: bytes.to_vec(),
            placed: false,
        }
    }

    /// Renames the file to its path: in place when this returns, durable once the returned
    /// [`DirSync`] has been waited on. When the temp dir is on another filesystem than the
    /// file's (no atomic rename between them), the file is written again beside its place.
    pub fn place(mut self) -> Result<DirSync> {
        let fs = &self.fs;
        let dir = self.path.parent().unwrap_or(&fs.root_path);
        let (rel, rel_tmp) = (fs.rel(&self.path)?, fs.rel(&self.tmp)?);
        if let Err(e) = fs.root.rename(rel_tmp, rel, RenameFlags::empty()) {
            let tmp_dir = self.tmp.parent().unwrap_or(dir);
            if errno(&e) == Some(libc::EXDEV) && tmp_dir != dir {
                let tmp_name = self.tmp.file_name().unwrap_or_default().to_string_lossy();
                let beside = fs.write_temp(&self.path, dir, &tmp_name, &self.bytes)?;
                return beside.place();
            }
            return Err(fs.error(SAVE_FAILED, &self.path, &e));
        }
        self.placed = true;
        // open_subpath: one openat2, where reopening a resolved handle goes through procfs.
        let dir_file = fs
            .root
            .open_subpath(
                fs.rel(dir)?,
                OpenFlags::O_RDONLY | OpenFlags::O_DIRECTORY | OpenFlags::O_CLOEXEC,
            )
            .map_err(|e| fs.error(SAVE_FAILED, &self.path, &e))?;
        Ok(DirSync {
            dir: dir_file,
            path: self.path.clone(),
        })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.placed {
            if let Ok(rel) = self.fs.rel(&self.tmp) {
                let _ = self.fs.root.remove_file(rel);
            }
        }
    }
}

/// The directory fsync that makes a [`TempFile::place`] rename durable, still to do: a caller
/// may run it beside other work (the driver call the file was written for).
#[must_use = "the rename is not durable until the directory is synced"]
pub struct DirSync {
    dir: File,
    path: PathBuf,
}

impl DirSync {
    pub fn wait(self) -> Result<()> {
        self.dir
            .sync_all()
            .map_err(|e| Error::io(format!("{SAVE_FAILED} [{}]", self.path.display()), &e))
    }
}

fn errno(e: &pathrs::error::Error) -> Option<i32> {
    match e.kind() {
        PathrsKind::OsError(n) => n,
        _ => None,
    }
}

/// The OS error behind a libpathrs error, so messages read as std's ("No such file or
/// directory (os error 2)"); libpathrs' own text when there is none.
fn os_error(e: &pathrs::error::Error) -> std::io::Error {
    match errno(e) {
        Some(n) => std::io::Error::from_raw_os_error(n),
        None => std::io::Error::other(e.to_string()),
    }
}
