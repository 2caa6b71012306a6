//! The kubelet's on-disk layout for CSI volumes and the `vol_data.json` beside each volume.
//! The only layer that composes kubelet paths; callers pass names, never path fragments.
//! Files below the root are only ever touched through [`beneath`], which follows no symlink,
//! and the files kcsi writes have one owner, [`files::Files`].

pub mod beneath;
mod blank_file;
pub mod blanks;
pub mod files;
pub mod inventory;
pub mod mounts;
pub mod paths;
mod save;
pub mod temp_dir;
#[cfg(test)]
mod test_support;
pub mod volume_data;
pub mod volume_lock;
