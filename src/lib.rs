//! kcsi: the Kubernetes kubelet's CSI volume plugin (upstream `pkg/volume/csi`) as a library.
//!
//! The safe core is organised by role; [`ffi`] is the C ABI shell over it.

pub mod attacher;
pub mod block;
pub mod capability;
pub mod config;
pub mod csi_client;
pub mod driver_facts;
pub mod driver_store;
pub mod error;
pub mod expander;
pub mod ffi;
pub mod fs_group;
mod goquote;
pub mod host;
pub mod kube;
pub mod logging;
pub mod metrics;
pub mod mounter;
pub mod operation;
pub mod paths;
pub mod plugin;
pub mod proto;
pub mod quantity;
pub mod reconstruct;
pub mod registration;
pub mod runtime;
pub mod spec;
pub mod version;
pub mod volume_data;
