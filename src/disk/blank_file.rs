//! The file operations of the blank pool ([`super::blanks`]): making a blank, writing a save
//! into one, and taking a `vol_data.json` a teardown is done with as one. Confined to the root
//! as every [`Beneath`] operation is.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use pathrs::flags::RenameFlags;
use rustix::fs::{FileType, OFlags};

use super::beneath::{Beneath, TempFile, SAVE_FAILED};
use crate::error::{Error, Result};

/// Makes the new file `tmp` a blank for [`fill`]: `len` zero bytes, its blocks allocated and
/// everything about it, its directory entry too, durable.
pub(super) fn make(fs: &Beneath, tmp: &Path, len: usize) -> Result<File> {
    let mut f = fs.create_exclusive(tmp, tmp)?;
    let made = f.write_all(&vec![0; len]).and_then(|()| f.sync_all());
    if let Err(e) = made {
        let _ = fs.root.remove_file(fs.rel(tmp)?);
        return Err(Error::io(
            format!("cannot make a blank volume data file [{}]", tmp.display()),
            &e,
        ));
    }
    Ok(f)
}

/// [`Beneath::write_temp`] into the blank `file` of `len` bytes at `tmp` ([`make`]): the
/// content overwrites blocks already allocated in a file whose entry is already durable, so its
/// fdatasync writes the data, and the inode only when the length changes (a new file's fsync
/// also writes its directory and allocates).
pub(super) fn fill(
    fs: &Beneath,
    path: &Path,
    tmp: PathBuf,
    file: File,
    len: usize,
    bytes: &[u8],
) -> Result<TempFile> {
    use std::os::unix::fs::FileExt;
    let owner = match fs.try_clone() {
        Ok(owner) => owner,
        Err(e) => {
            let _ = fs.root.remove_file(fs.rel(&tmp)?);
            return Err(e);
        }
    };
    let temp = TempFile::new(owner, tmp, path, bytes);
    let io = |e: std::io::Error| Error::io(format!("{SAVE_FAILED} [{}]", path.display()), &e);
    file.write_all_at(bytes, 0).map_err(io)?;
    if len != bytes.len() {
        file.set_len(bytes.len() as u64).map_err(io)?;
    }
    // A changed size is datasync metadata: fdatasync makes the whole file durable.
    file.sync_data().map_err(io)?;
    Ok(temp)
}

/// Moves the file at `path` to the new name `tmp` and returns it open for writing, with its
/// length, when it is a plain file kcsi could have written there: a regular file with no other
/// link, owned by this process's user and group, its mode within `rw-rw-rw-`, at most `limit`
/// bytes. A file that is done with, kept as a blank for [`fill`]. `None` leaves anything else
/// at `path` untouched (missing, a symlink, a directory, a device or FIFO, a hard link) for the
/// caller to remove; it is looked at through an `O_PATH` handle, never opened for writing.
/// `None` also when something replaced the file between the check and the rename: what was
/// moved is removed then.
pub(super) fn take(
    fs: &Beneath,
    path: &Path,
    tmp: &Path,
    limit: u64,
) -> Result<Option<(File, u64)>> {
    const TAKE_FAILED: &str = "failed to keep a volume data file as a blank";
    let (rel, rel_tmp) = (fs.rel(path)?, fs.rel(tmp)?);
    let stat = |fd: &OwnedFd| rustix::fs::fstat(fd).ok();
    let Some(Ok(handle)) = fs.probe(rel, OFlags::NOFOLLOW) else {
        return Ok(None);
    };
    let Some(st) = stat(&handle) else {
        return Ok(None);
    };
    let plain = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
        && st.st_nlink == 1
        && st.st_uid == rustix::process::geteuid().as_raw()
        && st.st_gid == rustix::process::getegid().as_raw()
        && st.st_mode & 0o7777 & !0o666 == 0
        && u64::try_from(st.st_size).is_ok_and(|n| n <= limit);
    if !plain {
        return Ok(None);
    }
    fs.root
        .rename(rel, rel_tmp, RenameFlags::RENAME_NOREPLACE)
        .map_err(|e| fs.error(TAKE_FAILED, path, &e))?;
    // `tmp` is a new name in kcsi's own temp dir: what is there is what was checked, unless it
    // was replaced at `path` between the two calls. Then it goes, as the removal this stands in
    // for would have removed it.
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let file = match fs.open_in_root(rel_tmp, flags) {
        Some(Ok(fd))
            if stat(&fd).is_some_and(|s| (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino)) =>
        {
            File::from(fd)
        }
        _ => {
            fs.remove_dir(tmp, TAKE_FAILED)?;
            return Ok(None);
        }
    };
    Ok(Some((file, st.st_size as u64)))
}
