//! kcsi: the Kubernetes kubelet's CSI volume plugin (upstream `pkg/volume/csi`) as a library.
//!
//! The safe core is organised by role; [`ffi`] is the C ABI shell over it.

pub mod capability;
pub mod config;
pub mod csi_client;
pub mod driver_facts;
pub mod driver_store;
pub mod error;
pub mod ffi;
mod goquote;
pub mod host;
pub mod logging;
pub mod paths;
pub mod operation;
pub mod plugin;
pub mod proto;
pub mod registration;
pub mod runtime;
pub mod spec;
pub mod version;
pub mod volume_data;
