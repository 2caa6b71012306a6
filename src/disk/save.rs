//! Writing `vol_data.json`. Differs from upstream on purpose (kubernetes/kubernetes#108217):
//! the file is written atomically (a temp file unique to the call, fsync, rename, directory
//! fsync), so a crash leaves the old file or the new one, never an empty one. [`stage`] writes
//! and fsyncs the temp file, which needs none of the volume's directories, and
//! [`Staged::place`] renames it once they are made. The temp file lives in kcsi's own
//! directory below the plugin dir ([`temp_dir`]), not in the pod volume or global mount dir: a
//! write killed half-way leaves nothing there (the kubelet's orphaned-pod cleanup removes only
//! empty dirs, and a dir without `vol_data.json` is never torn down), and what it leaves in the
//! temp dir is swept when a host starts. Only when that dir is on another filesystem than the
//! volume dir (no atomic rename between them) is the temp file made beside the file, and then
//! removed by the next save or teardown. The mode is upstream's: 0666 less the umask.

use std::path::{Path, PathBuf};

use super::beneath::{Beneath, DirSync, TempFile};
use super::blank_file;
use super::blanks::Blank;
use super::temp_dir::{make_temp_dir, remove_temp_files, temp_dir, temp_name, Writers};
use super::volume_data::FILE_NAME;
use crate::error::Result;

/// A [`super::files::OpenFiles::save`] up to its rename: the file's content (`bytes`, [`encode`]d) written and made
/// durable under a temp name in [`temp_dir`] (into `blank` when given, else a new file), which
/// needs none of `dir`'s levels, so it may run while they are made.
pub fn stage(fs: &Beneath, blank: Option<Blank>, dir: &Path, bytes: Vec<u8>) -> Result<Staged> {
    let tmp_dir = temp_dir(fs.root_path());
    let path = dir.join(FILE_NAME);
    let file = match blank.map(Blank::into_made) {
        // A blank is in the temp dir, so that dir exists.
        Some(b) => Pending::Temp(blank_file::fill(fs, &path, b.path, b.file, b.len, &bytes)?),
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

    /// Renames the file into place, as [`super::files::OpenFiles::save_then_sync`] returns.
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

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::disk::test_support::{names, volume_dir};
    use crate::disk::volume_data::{encode, VolumeData};

    #[test]
    fn stage_writes_before_the_dir_exists_and_leaves_nothing_when_dropped_unplaced() {
        let (root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        let fs = files.beneath();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        let later = dir.join("not/yet");
        let staged = stage(fs, None, &later, encode(&data).into_bytes()).unwrap();
        let tmp = temp_dir(root.path());
        assert_eq!(names(&tmp).len(), 1, "the temp file is written first");
        drop(staged);
        assert!(names(&tmp).is_empty());

        let staged = stage(fs, None, &later, encode(&data).into_bytes()).unwrap();
        files.make_dirs(&later).unwrap();
        staged.place(fs).unwrap().wait().unwrap();
        assert_eq!(files.load(&later).unwrap(), data);
        assert!(names(&tmp).is_empty());
    }

    #[test]
    fn a_save_into_a_dir_made_for_it_skips_the_temp_file_sweep_and_others_keep_it() {
        let (_root, files, dir) = volume_dir();
        let files = files.open().unwrap();
        let fs = files.beneath();
        let data: VolumeData = [("k".to_string(), "v".to_string())].into_iter().collect();
        let dead = ".vol_data.json.999999999.1.tmp";
        fs::write(dir.join(dead), "").unwrap();
        stage(fs, None, &dir, encode(&data).into_bytes())
            .unwrap()
            .place(fs)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(
            names(&dir),
            vec![FILE_NAME],
            "a dead writer's file is swept"
        );
        fs::write(dir.join(dead), "").unwrap();
        let staged = stage(fs, None, &dir, encode(&data).into_bytes())
            .unwrap()
            .in_new_dir();
        staged.place(fs).unwrap().wait().unwrap();
        assert_eq!(
            names(&dir),
            vec![dead, FILE_NAME],
            "no listing of a new dir"
        );
        assert_eq!(files.load(&dir).unwrap(), data);
    }
}
