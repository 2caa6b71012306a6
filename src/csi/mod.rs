//! The CSI side of the plugin: the generated protos, one gRPC client per driver, the store of
//! registered drivers, and registration with the kubelet's version rules
//! (upstream `csi_client.go`, `csi_drivers_store.go`, `csi_plugin.go` RegistrationHandler).
//! Nothing here knows Kubernetes API types.

pub mod csi_client;
pub mod driver_store;
pub mod plugin_watcher;
pub mod proto;
pub mod registration;
pub mod version;
