//! kcsi: the Kubernetes kubelet's CSI volume plugin (upstream `pkg/volume/csi`) as a library.
//!
//! Layers, each a folder (dependencies point down this list, never up; `scripts/check-layers.sh`
//! enforces the rules in CI):
//! - [`ffi`]: the C ABI shell: converts and checks arguments, catches panics, owns no logic.
//! - [`volume`]: the volume operations the kubelet runs (mounter, attacher, block, expansion,
//!   metrics, reconstruction, plugin queries) and the facts they are built from.
//! - [`csi`]: the CSI side: protos, the gRPC client, the registered-driver store, registration
//!   and version rules. The client knows no Kubernetes types.
//! - [`kube`]: Kubernetes API access (absent in standalone mode). Knows no CSI types.
//! - [`disk`]: the kubelet's on-disk layout and `vol_data.json`; the only place that composes
//!   kubelet paths.
//! - The shared vocabulary at the top: [`error`], [`config`], [`host`], [`runtime`],
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
pub mod host;
pub mod kube;
pub mod logging;
pub mod plain_spec;
pub mod runtime;
pub mod spec;
pub mod telemetry;
pub mod volume;
