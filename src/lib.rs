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

pub mod config;
pub mod csi;
pub mod disk;
pub mod error;
pub mod ffi;
mod goquote;
mod grpcgo;
pub mod host;
pub mod kube;
pub mod logging;
mod names;
pub mod node;
pub mod plain_spec;
pub mod runtime;
pub mod spec;
pub mod telemetry;
pub mod volume;
