//! The volume operations the kubelet runs through the CSI plugin (upstream `csi_mounter.go`,
//! `csi_attacher.go`, `csi_block.go`, `expander.go`, `csi_metrics.go`, `csi_plugin.go`), and the
//! facts they are built from: CSI capabilities, CSIDriver facts, fsGroup, quantities.

pub mod attacher;
pub mod block;
pub mod capability;
pub mod driver_facts;
pub mod expander;
pub mod fs_group;
pub mod metrics;
pub mod mounter;
pub mod operation;
pub mod plugin;
pub mod quantity;
pub mod reconstruct;
