//! kcsi: the Kubernetes kubelet's CSI volume plugin (upstream `pkg/volume/csi`) as a library.
//!
//! Layers, top down (imports point down this list, never up; `scripts/check-layers.sh`
//! enforces the rules in CI, `docs/architecture.md` draws them):
//! - [`ffi`]: the C ABI shell: converts and checks arguments, catches panics, owns no logic.
//! - [`node`]: the node agent: plugin watcher, registration handler, CSINode allocatable
//!   updater; the background work of a node, above the context it works on.
//! - [`volume`]: the volume operations the kubelet runs (mounter, attacher, block, expansion,
//!   metrics, reconstruction, plugin queries) and the facts they are built from.
//! - [`host`]: the context every operation takes: config, layout, registered drivers,
//!   Kubernetes access, telemetry, volume locks.
//! - [`csi`]: the CSI side: protos, the gRPC client, the registered-driver store, the
//!   registration rules and version rules. Knows no Kubernetes types.
//! - [`kube`]: Kubernetes API access (absent in standalone mode). Knows no CSI types.
//! - [`disk`]: the kubelet's on-disk layout, `vol_data.json`, the mount table and the walk
//!   over what is staged and published; the only place that composes kubelet paths.
//! - The shared vocabulary, used from every layer: [`error`], [`config`], [`runtime`],
//!   [`logging`], [`spec`] (with [`plain_spec`]), [`telemetry`] (the host's metrics registry).

/// Upstream's message form for the CSI plugin, `kubernetes.io/csi: <msg>`
/// (`pkg/volume/csi/csi_util.go log`): `csi_log!("mounter.SetUpAt failed [{}]", dir)`.
macro_rules! csi_log {
    ($($arg:tt)*) => {
        format!("kubernetes.io/csi: {}", format_args!($($arg)*))
    };
}

mod code_pages;
mod config;
mod csi;
mod disk;
mod error;
pub mod ffi;
mod goquote;
mod grpcgo;
mod host;
mod kube;
mod logging;
mod names;
mod node;
mod one_heap;
mod plain_spec;
mod runtime;
mod spec;
mod stack_pages;
mod telemetry;
mod volume;

// The facade: what a program built on kcsi (the `kcsi` command and its volume plugin, the
// integration tests and benchmarks) uses. Everything else is the crate's own.

pub use config::{HostConfig, Role};
pub use error::{Error, ErrorClass, ErrorKind, Result};
pub use host::{DriverStatus, Host, HostStatus};
pub use node::plugin_watcher::{PluginWatcherStatus, SocketStatus};
pub use node::NodeAgent;
pub use spec::VolumeSpec;

/// The volume operations on a node, as the kubelet's volume manager runs them.
pub use volume::block::{BlockMapper, BlockUnmapper, MapperPaths};
pub use volume::expander::{node_expand, ExpandOptions};
pub use volume::metrics::{volume_stats, VolumeMetrics};
pub use volume::mounter::{Mounter, MounterArgs, Unmounter};
pub use volume::plugin::unique_volume_name;

/// The attacher (upstream `csiAttacher`) on a node: wait for the attachment, mount and
/// unmount the device.
pub mod attacher {
    pub use crate::volume::attacher::{
        device_mount_path, mount_device, unmount_device, unmount_device_by_handle, wait_for_attach,
        MountDeviceArgs,
    };
}

/// The registration handler (upstream `RegistrationHandler`): a driver's socket registered,
/// checked and deregistered.
pub mod registration {
    pub use crate::node::registration::{deregister, register, validate};
}

/// A volume's spec rebuilt from what is on disk (the kubelet's reconstruction).
pub mod reconstruct {
    pub use crate::volume::block::construct_block_volume_spec;
    pub use crate::volume::reconstruct::{construct_volume_spec, RebuiltSpec, Reconstructed};
}

/// What is staged and published under a root: one walk over the kubelet's layout.
pub mod inventory {
    pub use crate::disk::inventory::{walk, DataFile, Inventory, Kind, Published, Staged};
}

/// The kubelet's on-disk layout and the files kcsi writes there.
pub use disk::beneath::{Beneath, Entry};
pub use disk::files::Files;
pub use disk::mounts::{is_mount_point, mounts_below};
pub use disk::paths::{
    attachment_name, ephemeral_volume_handle, sha256_hex, Layout, ESCAPED_PLUGIN_NAME,
};
pub use disk::temp_dir::temp_dir;
pub use disk::volume_data::keys as volume_data_keys;
pub use disk::volume_lock::VolumeLocks;

/// The CSI side: the protos, and what kcsi reads from a driver.
pub use csi::csi_client::{socket_path, NodeCapabilities, NodeInfo};
pub use csi::proto;

/// Kubernetes API access: the client and the node info kcsi keeps on Node and CSINode.
pub use kube::client::ApiClient;
pub use kube::node_info::{
    migrated_plugins, NodeInfoManager, ANNOTATION_MIGRATED_PLUGINS, ANNOTATION_NODE_ID,
};

/// Values a host program passes in: access modes, quantities, secrets files, CSIDriver facts.
pub use plain_spec::SecretsFile;
pub use volume::capability::access_mode;
pub use volume::driver_facts::FsGroupPolicy;
pub use volume::quantity::parse_bytes;

/// The process-wide runtime, log routing and a host's metrics registry.
pub use logging::{init as init_logging, set_sink as set_log_sink};
pub use runtime::{block_on, handle as runtime_handle};
pub use telemetry::{CsiRecorder, Telemetry};
