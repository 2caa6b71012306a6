//! The kubelet's on-disk layout for CSI volumes and the `vol_data.json` beside each volume.
//! The only layer that composes kubelet paths; callers pass names, never path fragments.

pub mod inventory;
pub mod paths;
pub mod volume_data;
