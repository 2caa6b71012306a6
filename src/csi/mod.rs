//! The CSI side of the plugin: the generated protos, one gRPC client per driver, the store of
//! registered drivers, and the rules a registration must pass (names, endpoints, the kubelet's
//! version rules; upstream `csi_client.go`, `csi_drivers_store.go`, `csi_plugin.go`
//! `validateVersions`). Registering a driver with a node (its node info in the API, the
//! plugin watcher) is the node agent's (`crate::node`). Nothing here knows Kubernetes API types
//! or the host.

mod connection;
pub mod csi_client;
pub mod driver_store;
pub mod proto;
pub mod validation;
pub mod version;
