//! Host handles.

use std::ffi::c_char;
use std::sync::Arc;

use serde::Serialize;

use super::boundary::{guard, out_arg, str_arg, write_json_sorted, write_value};
use super::catch::guard_value;
use super::config::host_config;
use super::error::kcsi_error;
use super::handle::{free_handle, handle_arg, Handle};
use super::kcsi_result;
use crate::error::{Error, ErrorKind, Result};
use crate::host::{Host, HostStatus};
use crate::node::plugin_watcher::PluginWatcherStatus;
use crate::node::NodeAgent;
use crate::{logging, runtime};

/// `kcsi_host_status`' JSON: the host's status and, on a node agent, its plugin watcher's.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    #[serde(flatten)]
    host: HostStatus,
    plugin_watcher: Option<PluginWatcherStatus>,
}

/// One instance of kcsi: its drivers and state, and on a node its node agent (plugin watcher,
/// allocatable updater). Free with `kcsi_host_free`.
pub struct kcsi_host {
    host: Arc<Host>,
    node: Option<Arc<NodeAgent>>,
}

impl Handle for kcsi_host {
    const NAME: &'static str = "host";
    type Inner = Host;
    fn wrap(host: Arc<Host>) -> Self {
        kcsi_host { host, node: None }
    }
    fn inner(&self) -> &Arc<Host> {
        &self.host
    }
}

/// The node agent behind a host argument, as the call's own reference.
pub(crate) fn node_arg(h: *const kcsi_host) -> Result<Arc<NodeAgent>> {
    handle_arg(h)?;
    unsafe { &*h }.node.clone().ok_or_else(|| {
        Error::new(
            ErrorKind::NotSupported,
            "this kcsi_host has no node agent (it was not made by kcsi_host_new)",
        )
    })
}

/// Creates a host from `config_json` (see the C API contract: `nodeName` and `rootDir` are
/// required; unknown keys are rejected). With `"pluginWatcher": true` the host watches
/// `<rootDir>/plugins_registry/` (or `"pluginsRegistryDir"`, an absolute path) for
/// node-driver-registrar sockets and registers their drivers as the kubelet's plugin manager
/// does; the directory is created if missing. On success `*host_out` receives a host the
/// caller owns and frees with `kcsi_host_free`; on error it is unchanged.
#[no_mangle]
pub extern "C" fn kcsi_host_new(
    config_json: *const c_char,
    host_out: *mut *mut kcsi_host,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let config = host_config(str_arg(config_json, "config_json")?)?;
        out_arg(host_out, "host_out")?;
        logging::init();
        let _rt = runtime::handle()?.enter();
        let handle = if config.is_controller() {
            // The attach/detach controller's half: no node, so no node agent.
            kcsi_host {
                host: Arc::new(Host::new(config)?),
                node: None,
            }
        } else {
            // Started already shared: the plugin watcher holds the agent weakly.
            let node = NodeAgent::start(config)?;
            kcsi_host {
                host: node.host.clone(),
                node: Some(node),
            }
        };
        write_value(host_out, Box::into_raw(Box::new(handle)));
        Ok(())
    })
}

/// The host's status as JSON: `{"csiNodeInitialized", "lastError", "drivers", ...,
/// "pluginWatcher"}`. `pluginWatcher` is null unless configured, else `{"dir", "socketsSeen",
/// "lastError", "sockets": [{"path", "state", "driver", "endpoint", "attempts",
/// "lastError"}]}` with `state` one of `registering`, `registered` or `retrying` (failed,
/// tried again with backoff). Caller frees `*status_json_out` with `kcsi_string_free`.
#[no_mangle]
pub extern "C" fn kcsi_host_status(
    h: *mut kcsi_host,
    status_json_out: *mut *mut c_char,
    err_out: *mut *mut kcsi_error,
) -> kcsi_result {
    guard!(err_out, || {
        let host = handle_arg(h)?;
        out_arg(status_json_out, "status_json_out")?;
        let status = Status {
            host: host.status(),
            plugin_watcher: node_arg(h).ok().and_then(|n| n.plugin_watcher_status()),
        };
        write_json_sorted(status_json_out, &status, "the host status")
    })
}

/// Frees a host and stops its background work, the plugin watcher at once (drivers it
/// registered stay registered, as when a kubelet stops). Handles created from it stay valid
/// and then fail with `KCSI_ERR_FAILED_PRECONDITION`. A call on the host still running in
/// another thread finishes first (the host goes when the last such call returns). Calling
/// with NULL is fine.
#[no_mangle]
pub extern "C" fn kcsi_host_free(h: *mut kcsi_host) {
    guard_value((), || {
        if let Some(node) = unsafe { h.as_ref() }.and_then(|h| h.node.as_ref()) {
            node.stop();
        }
        free_handle(h)
    })
}
