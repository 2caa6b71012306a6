//! The kubelet's on-disk layout for CSI volumes and the `vol_data.json` beside each volume.
//! The only layer that composes kubelet paths; callers pass names, never path fragments.
//! Files below the root are only ever touched through [`beneath`], which follows no symlink.

pub mod beneath;
pub mod blanks;
pub mod inventory;
pub mod mounts;
pub mod paths;
pub mod volume_data;
pub mod volume_lock;
