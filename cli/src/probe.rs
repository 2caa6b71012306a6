//! Data through the published volume, as a pod would move it: a file written and read back
//! through the pod's mount path, or bytes through the published block device (restored
//! after). On a read-only volume the write must be refused.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind as IoKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use kcsi::is_mount_point;
use kcsi::{Error, ErrorKind, Result};

const SIZE: usize = 4096;

fn pattern() -> Vec<u8> {
    let seed = format!(
        "kcsi probe {} {:?} ",
        std::process::id(),
        std::time::SystemTime::now()
    );
    seed.bytes().cycle().take(SIZE).collect()
}

fn io(what: String, e: std::io::Error) -> Error {
    Error::io(what, &e)
}

fn read_only_refused(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EROFS) || e.kind() == IoKind::PermissionDenied
}

/// A file through the pod's mount path.
pub fn filesystem(path: &Path, read_only: bool) -> Result<String> {
    if !is_mount_point(path)? {
        return Err(Error::new(
            ErrorKind::FailedPrecondition,
            format!(
                "{} is not a mount point: NodePublishVolume returned OK but mounted nothing there",
                path.display()
            ),
        ));
    }
    let file = path.join(format!(".kcsi-probe-{}", std::process::id()));
    if read_only {
        return match fs::write(&file, b"x") {
            Err(e) if read_only_refused(&e) => {
                fs::read_dir(path).map_err(|e| io(format!("cannot list {}", path.display()), e))?;
                Ok(format!(
                    "read-only volume: listing works, writing is refused ({e})"
                ))
            }
            Err(e) => Err(io(format!("cannot write {}", file.display()), e)),
            Ok(()) => {
                let _ = fs::remove_file(&file);
                Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    format!(
                        "{} was published read-only, but a write succeeded",
                        path.display()
                    ),
                ))
            }
        };
    }
    let data = pattern();
    let write = || -> std::io::Result<Vec<u8>> {
        let mut f = fs::File::create(&file)?;
        f.write_all(&data)?;
        f.sync_all()?;
        fs::read(&file)
    };
    let back = write().map_err(|e| io(format!("probe file {}", file.display()), e));
    let _ = fs::remove_file(&file);
    if back? != data {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "{} read back different bytes than were written",
                file.display()
            ),
        ));
    }
    Ok(format!(
        "wrote, synced and read back {SIZE} bytes in {}",
        file.display()
    ))
}

/// Bytes through the published device file; the original bytes are written back.
pub fn block(path: &Path, read_only: bool) -> Result<String> {
    let meta = fs::metadata(path).map_err(|e| io(format!("cannot stat {}", path.display()), e))?;
    if !meta.file_type().is_block_device() {
        return Err(Error::new(
            ErrorKind::FailedPrecondition,
            format!(
                "{} is not a block device: NodePublishVolume returned OK but published no device there",
                path.display()
            ),
        ));
    }
    let mut original = vec![0; SIZE];
    let mut dev = match OpenOptions::new().read(true).write(!read_only).open(path) {
        Ok(d) => d,
        Err(e) => return Err(io(format!("cannot open {}", path.display()), e)),
    };
    dev.read_exact(&mut original)
        .map_err(|e| io(format!("cannot read {}", path.display()), e))?;
    if read_only {
        return match OpenOptions::new().write(true).open(path) {
            Err(e) if read_only_refused(&e) => Ok(format!(
                "read-only device: reading works, opening for write is refused ({e})"
            )),
            Err(e) => Err(io(format!("cannot open {}", path.display()), e)),
            Ok(_) => Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "{} was published read-only, but opens for writing",
                    path.display()
                ),
            )),
        };
    }
    let data = pattern();
    let mut round_trip = || -> std::io::Result<Vec<u8>> {
        dev.seek(SeekFrom::Start(0))?;
        dev.write_all(&data)?;
        dev.sync_all()?;
        let mut back = vec![0; SIZE];
        dev.seek(SeekFrom::Start(0))?;
        dev.read_exact(&mut back)?;
        Ok(back)
    };
    let back = round_trip();
    let restore = dev
        .seek(SeekFrom::Start(0))
        .and_then(|_| dev.write_all(&original))
        .and_then(|_| dev.sync_all());
    let back = back.map_err(|e| io(format!("I/O through {}", path.display()), e))?;
    restore.map_err(|e| {
        io(
            format!(
                "cannot restore the first {SIZE} bytes of {}",
                path.display()
            ),
            e,
        )
    })?;
    if back != data {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "{} read back different bytes than were written",
                path.display()
            ),
        ));
    }
    Ok(format!(
        "wrote, synced and read back {SIZE} bytes through {} (original bytes restored)",
        path.display()
    ))
}
