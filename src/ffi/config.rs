//! The host config's JSON, as `kcsi_host_new` takes it (unknown keys rejected), converted to
//! the core's typed [`HostConfig`] and checked there.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::storage::v1::CSIDriver;
use serde::Deserialize;

use crate::config::{self, HostConfig, KubeconfigData, Role, MAX_TIMEOUT};
use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    node_name: Option<String>,
    root_dir: Option<String>,
    kubeconfig: Option<String>,
    kubeconfig_data: Option<String>,
    timeout_seconds: Option<f64>,
    idle_connection_seconds: Option<f64>,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
    #[serde(default)]
    csi_drivers: Vec<CSIDriver>,
    #[serde(default)]
    csi_drivers_from_host: bool,
    #[serde(default)]
    volume_attachments_from_host: bool,
    #[serde(default)]
    plugin_watcher: bool,
    plugins_registry_dir: Option<String>,
    role: Option<String>,
}

/// The checked config `json` describes. An empty string is an absent key.
pub(crate) fn host_config(json: &str) -> Result<HostConfig> {
    let raw: RawConfig = serde_json::from_str(json)
        .map_err(|e| Error::invalid(format!("host config is not valid: {e}")))?;
    let role = match raw.role.as_deref() {
        None | Some("node") => Role::Node,
        Some("controller") => Role::Controller,
        Some(other) => {
            return Err(Error::invalid(format!(
            "host config is not valid: \"role\" must be \"node\" or \"controller\", got {other:?}"
        )))
        }
    };
    let defaults = HostConfig::default();
    HostConfig {
        role,
        node_name: raw.node_name.unwrap_or_default(),
        root_dir: PathBuf::from(raw.root_dir.unwrap_or_default()),
        kubeconfig: raw.kubeconfig.filter(|k| !k.is_empty()).map(PathBuf::from),
        kubeconfig_data: raw
            .kubeconfig_data
            .filter(|k| !k.is_empty())
            .map(KubeconfigData),
        timeout: seconds("timeoutSeconds", raw.timeout_seconds, defaults.timeout)?,
        idle_connection: seconds(
            "idleConnectionSeconds",
            raw.idle_connection_seconds,
            defaults.idle_connection,
        )?,
        feature_gates: raw.feature_gates,
        csi_drivers: raw.csi_drivers,
        csi_drivers_from_host: raw.csi_drivers_from_host,
        volume_attachments_from_host: raw.volume_attachments_from_host,
        plugin_watcher: raw.plugin_watcher,
        plugins_registry_dir: raw.plugins_registry_dir.map(PathBuf::from),
    }
    .check()
}

/// A duration key in seconds: absent is `default`; a number a `Duration` cannot hold is
/// refused here, the rest of the range by [`HostConfig::check`].
fn seconds(key: &str, value: Option<f64>, default: Duration) -> Result<Duration> {
    match value {
        None => Ok(default),
        Some(t) if t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT.as_secs_f64() => {
            Ok(Duration::from_secs_f64(t))
        }
        Some(t) => Err(config::out_of_range(key, t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_rejects_unknown_key_naming_it() {
        let err = host_config(r#"{"nodeName":"n","rootDir":"/r","bogus":1}"#).unwrap_err();
        assert!(err.message().contains("bogus"), "{}", err.message());
    }

    #[test]
    fn config_takes_node_and_root_and_treats_empty_as_absent() {
        let c = host_config(r#"{"nodeName":"n","rootDir":"/r","kubeconfig":""}"#).unwrap();
        assert_eq!(
            (c.node_name.as_str(), c.root_dir.to_str()),
            ("n", Some("/r"))
        );
        assert_eq!(c.kubeconfig, None);
        let err = host_config(r#"{"nodeName":"","rootDir":"/r"}"#).unwrap_err();
        assert!(
            err.message().contains("\"nodeName\" is required"),
            "{}",
            err.message()
        );
        let err = host_config(r#"{"nodeName":"n","rootDir":"rel"}"#).unwrap_err();
        assert!(err.message().contains("absolute"), "{}", err.message());
    }

    #[test]
    fn config_takes_idle_connection_seconds_and_refuses_zero_naming_the_key() {
        let c =
            host_config(r#"{"nodeName":"n","rootDir":"/r","idleConnectionSeconds":1.5}"#).unwrap();
        assert_eq!(c.idle_connection, Duration::from_millis(1500));
        for bad in ["0", "-1", "86401", "1e300"] {
            let json =
                format!(r#"{{"nodeName":"n","rootDir":"/r","idleConnectionSeconds":{bad}}}"#);
            let err = host_config(&json).unwrap_err();
            assert!(
                err.message()
                    .contains("\"idleConnectionSeconds\" must be > 0"),
                "{}",
                err.message()
            );
        }
    }

    #[test]
    fn kubeconfig_data_is_an_api_source_of_its_own_and_never_printed() {
        let c = host_config(
            r#"{"role":"controller","kubeconfigData":"apiVersion: v1\nkind: Config\n# token: s3cret"}"#,
        )
        .unwrap();
        assert!(c.kubeconfig_data.is_some());
        assert!(!format!("{c:?}").contains("s3cret"), "{c:?}");
        let err = host_config(
            r#"{"nodeName":"n","rootDir":"/r","kubeconfig":"/k","kubeconfigData":"x"}"#,
        )
        .unwrap_err();
        assert!(err.message().contains("both set"), "{}", err.message());
    }

    #[test]
    fn config_role_is_node_or_controller() {
        let c = host_config(r#"{"role":"controller","kubeconfig":"/k"}"#).unwrap();
        assert!(c.is_controller());
        let c = host_config(r#"{"role":"node","nodeName":"n","rootDir":"/r"}"#).unwrap();
        assert!(!c.is_controller());
        let err = host_config(r#"{"role":"scheduler","kubeconfig":"/k"}"#).unwrap_err();
        assert!(err.message().contains("scheduler"), "{}", err.message());
        let err = host_config(r#"{"role":"controller","kubeconfig":""}"#).unwrap_err();
        assert!(
            err.message().contains("requires \"kubeconfig\""),
            "{}",
            err.message()
        );
    }
}
