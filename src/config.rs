//! Host configuration, as the C API's `kcsi_host_new` takes it (JSON, unknown keys rejected).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::storage::v1::CSIDriver;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::names::check_name;

/// The kubelet's `csiTimeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a driver's connection may stay unused before kcsi closes it. The kubelet asks each
/// mounted volume's driver for its stats every minute, so a driver in use keeps its connection;
/// an unused one gives back its socket and buffers.
pub const DEFAULT_IDLE_CONNECTION: Duration = Duration::from_secs(300);

/// The longest deadline kcsi uses; longer ones a caller asks for are shortened to it (gRPC
/// cannot encode, and a clock cannot add, arbitrarily long durations).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Feature gates the plugin consults, with their defaults in Kubernetes v1.36.3
/// (`pkg/features/kube_features.go`); any other name is refused, as the kubelet refuses
/// unrecognized gates. Upstream locks SELinuxMountReadWriteOncePod, CSIServiceAccountTokenSecrets
/// and MutableCSINodeAllocatableCount to true and has dropped CSIMigrationPortworx (Portworx is
/// always migrated, `pkg/volume/csi/csi_plugin.go Init`); kcsi still honours an explicit value
/// for them, so a host can reproduce an older kubelet.
pub const KNOWN_GATES: &[(&str, bool)] = &[
    ("SELinuxMountReadWriteOncePod", true),
    ("SELinuxMount", false),
    ("CSIVolumeHealth", false),
    ("CSIServiceAccountTokenSecrets", true),
    ("MutableCSINodeAllocatableCount", true),
    ("CSIMigrationPortworx", true),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    node_name: Option<String>,
    root_dir: Option<String>,
    kubeconfig: Option<String>,
    timeout_seconds: Option<f64>,
    idle_connection_seconds: Option<f64>,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
    #[serde(default)]
    csi_drivers: Vec<CSIDriver>,
    #[serde(default)]
    csi_drivers_from_host: bool,
    #[serde(default)]
    plugin_watcher: bool,
    plugins_registry_dir: Option<String>,
    role: Option<String>,
}

/// Which half of upstream's CSI plugin a host is: the kubelet's (`"node"`, the default) or
/// the attach/detach controller's (`"controller"`, in the kube-controller-manager).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Node,
    Controller,
}

#[derive(Clone, Debug)]
pub struct HostConfig {
    pub role: Role,
    /// Empty on a controller host (it serves every node).
    pub node_name: String,
    /// Empty on a controller host (it has no volumes on disk).
    pub root_dir: PathBuf,
    pub kubeconfig: Option<PathBuf>,
    pub timeout: Duration,
    /// A driver connection unused this long is closed (`"idleConnectionSeconds"`).
    pub idle_connection: Duration,
    pub feature_gates: BTreeMap<String, bool>,
    /// Standalone mode's stand-ins for the API's CSIDriver objects.
    pub csi_drivers: Vec<CSIDriver>,
    /// The host program keeps kcsi's CSIDriver objects current (`"csiDriversFromHost"`, from
    /// an informer it already runs) instead of kcsi listing and watching them itself.
    pub csi_drivers_from_host: bool,
    /// Whether the host runs the kubelet's plugin watcher (`"pluginWatcher"`).
    pub plugin_watcher: bool,
    /// The watched directory when not `<rootDir>/plugins_registry` (`"pluginsRegistryDir"`).
    pub plugins_registry_dir: Option<PathBuf>,
}

impl HostConfig {
    pub fn from_json(json: &str) -> Result<HostConfig> {
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
        let (node_name, root_dir) = match role {
            Role::Node => node_identity(&raw)?,
            Role::Controller => {
                controller_checks(&raw)?;
                (String::new(), PathBuf::new())
            }
        };
        let timeout = seconds("timeoutSeconds", raw.timeout_seconds, DEFAULT_TIMEOUT)?;
        let idle_connection = seconds(
            "idleConnectionSeconds",
            raw.idle_connection_seconds,
            DEFAULT_IDLE_CONNECTION,
        )?;
        for gate in raw.feature_gates.keys() {
            if !KNOWN_GATES.iter().any(|(name, _)| name == gate) {
                let known: Vec<&str> = KNOWN_GATES.iter().map(|(name, _)| *name).collect();
                return Err(Error::invalid(format!(
                    "host config is not valid: unrecognized feature gate {gate:?} in \"featureGates\" (known: {})",
                    known.join(", ")
                )));
            }
        }
        let kubeconfig = raw.kubeconfig.filter(|k| !k.is_empty()).map(PathBuf::from);
        if kubeconfig.is_some() && !raw.csi_drivers.is_empty() {
            return Err(Error::invalid(
                "host config is not valid: \"csiDrivers\" is for standalone mode only; with a \
                 \"kubeconfig\" CSIDriver objects come from the API server",
            ));
        }
        if raw.csi_drivers_from_host && kubeconfig.is_none() {
            return Err(Error::invalid(
                "host config is not valid: \"csiDriversFromHost\" needs a \"kubeconfig\"; a \
                 standalone host's CSIDriver objects are its \"csiDrivers\"",
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for d in &raw.csi_drivers {
            let name = d.metadata.name.as_deref().unwrap_or("");
            if name.is_empty() {
                return Err(Error::invalid(
                    "host config is not valid: a CSIDriver in \"csiDrivers\" has no metadata.name",
                ));
            }
            if !names.insert(name.to_string()) {
                return Err(Error::invalid(format!(
                    "host config is not valid: CSIDriver {name:?} appears twice in \"csiDrivers\""
                )));
            }
        }
        let plugins_registry_dir = raw.plugins_registry_dir.map(PathBuf::from);
        match &plugins_registry_dir {
            Some(_) if !raw.plugin_watcher => {
                return Err(Error::invalid(
                    "host config is not valid: \"pluginsRegistryDir\" is set but \"pluginWatcher\" is not true",
                ))
            }
            Some(dir) if !dir.is_absolute() || dir.as_os_str().as_encoded_bytes().contains(&0) => {
                return Err(Error::invalid(format!(
                    "host config is not valid: \"pluginsRegistryDir\" must be an absolute path, got {dir:?}"
                )))
            }
            _ => {}
        }
        Ok(HostConfig {
            role,
            node_name,
            root_dir,
            kubeconfig,
            timeout,
            idle_connection,
            feature_gates: raw.feature_gates,
            csi_drivers: raw.csi_drivers,
            csi_drivers_from_host: raw.csi_drivers_from_host,
            plugin_watcher: raw.plugin_watcher,
            plugins_registry_dir,
        })
    }

    pub fn is_controller(&self) -> bool {
        self.role == Role::Controller
    }

    /// The gate as the config sets it, else its v1.36.3 default.
    pub fn gate(&self, name: &str) -> bool {
        let default = KNOWN_GATES
            .iter()
            .find(|(n, _)| *n == name)
            .is_some_and(|(_, on)| *on);
        self.feature_gates.get(name).copied().unwrap_or(default)
    }
}

/// A node host's `nodeName` and `rootDir`, both required.
fn node_identity(raw: &RawConfig) -> Result<(String, PathBuf)> {
    let node_name = raw
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::invalid("host config is not valid: \"nodeName\" is required"))?;
    check_name("nodeName", &node_name)?;
    let root_dir = raw
        .root_dir
        .clone()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| Error::invalid("host config is not valid: \"rootDir\" is required"))?;
    if !root_dir.starts_with('/') || root_dir.contains('\0') {
        return Err(Error::invalid(format!(
            "host config is not valid: \"rootDir\" must be an absolute path, got {root_dir:?}"
        )));
    }
    Ok((node_name, PathBuf::from(root_dir)))
}

/// A controller host serves every node from the API server: it needs a kubeconfig and has
/// no node of its own, no volumes on disk and no plugin registry to watch.
fn controller_checks(raw: &RawConfig) -> Result<()> {
    if raw.kubeconfig.as_deref().unwrap_or("").is_empty() {
        return Err(Error::invalid(
            "host config is not valid: \"role\": \"controller\" requires \"kubeconfig\"",
        ));
    }
    let node_keys = [
        (
            "nodeName",
            raw.node_name.as_deref().is_some_and(|n| !n.is_empty()),
        ),
        (
            "rootDir",
            raw.root_dir.as_deref().is_some_and(|r| !r.is_empty()),
        ),
        ("pluginWatcher", raw.plugin_watcher),
        ("pluginsRegistryDir", raw.plugins_registry_dir.is_some()),
    ];
    if let Some((key, _)) = node_keys.iter().find(|(_, set)| *set) {
        return Err(Error::invalid(format!(
            "host config is not valid: {key:?} is for node hosts; a \"role\": \"controller\" host serves every node and keeps nothing on disk"
        )));
    }
    Ok(())
}

/// A duration key in seconds: absent is `default`, else in (0, 86400].
fn seconds(key: &str, value: Option<f64>, default: Duration) -> Result<Duration> {
    match value {
        None => Ok(default),
        Some(t) if t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT.as_secs_f64() => {
            Ok(Duration::from_secs_f64(t))
        }
        Some(t) => Err(Error::invalid(format!(
            "host config is not valid: {key:?} must be > 0 and at most 86400, got {t}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_rejects_unknown_key_naming_it() {
        let err =
            HostConfig::from_json(r#"{"nodeName":"n","rootDir":"/r","bogus":1}"#).unwrap_err();
        assert!(err.message().contains("bogus"), "{}", err.message());
    }

    #[test]
    fn config_requires_node_and_absolute_root() {
        assert!(HostConfig::from_json(r#"{"rootDir":"/r"}"#).is_err());
        assert!(HostConfig::from_json(r#"{"nodeName":"n","rootDir":"rel"}"#).is_err());
        let c = HostConfig::from_json(r#"{"nodeName":"n","rootDir":"/r"}"#).unwrap();
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        assert_eq!(c.idle_connection, DEFAULT_IDLE_CONNECTION);
    }

    #[test]
    fn config_takes_idle_connection_seconds_and_refuses_zero_naming_the_key() {
        let c =
            HostConfig::from_json(r#"{"nodeName":"n","rootDir":"/r","idleConnectionSeconds":1.5}"#)
                .unwrap();
        assert_eq!(c.idle_connection, Duration::from_millis(1500));
        let err =
            HostConfig::from_json(r#"{"nodeName":"n","rootDir":"/r","idleConnectionSeconds":0}"#)
                .unwrap_err();
        assert!(
            err.message()
                .contains("\"idleConnectionSeconds\" must be > 0"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn config_takes_plugin_watcher_and_refuses_a_stray_or_relative_registry_dir() {
        let c = HostConfig::from_json(
            r#"{"nodeName":"n","rootDir":"/r","pluginWatcher":true,"pluginsRegistryDir":"/reg"}"#,
        )
        .unwrap();
        assert!(c.plugin_watcher);
        assert_eq!(c.plugins_registry_dir, Some(PathBuf::from("/reg")));
        let err =
            HostConfig::from_json(r#"{"nodeName":"n","rootDir":"/r","pluginsRegistryDir":"/reg"}"#)
                .unwrap_err();
        assert!(err.message().contains("pluginWatcher"), "{}", err.message());
        let err = HostConfig::from_json(
            r#"{"nodeName":"n","rootDir":"/r","pluginWatcher":true,"pluginsRegistryDir":"reg"}"#,
        )
        .unwrap_err();
        assert!(err.message().contains("absolute"), "{}", err.message());
    }

    #[test]
    fn gates_default_as_in_kubernetes_1_36_unless_set() {
        let c = HostConfig::from_json(r#"{"nodeName":"n","rootDir":"/r"}"#).unwrap();
        assert!(c.gate("SELinuxMountReadWriteOncePod"));
        assert!(c.gate("MutableCSINodeAllocatableCount"));
        assert!(c.gate("CSIMigrationPortworx"));
        assert!(!c.gate("SELinuxMount"));
        assert!(!c.gate("CSIVolumeHealth"));
        let c = HostConfig::from_json(
            r#"{"nodeName":"n","rootDir":"/r","featureGates":{"CSIMigrationPortworx":false,"CSIVolumeHealth":true}}"#,
        )
        .unwrap();
        assert!(!c.gate("CSIMigrationPortworx"));
        assert!(c.gate("CSIVolumeHealth"));
    }

    #[test]
    fn controller_role_requires_kubeconfig_and_refuses_node_keys() {
        let c = HostConfig::from_json(r#"{"role":"controller","kubeconfig":"/k"}"#).unwrap();
        assert!(c.is_controller());
        assert_eq!(c.node_name, "");
        let err = HostConfig::from_json(r#"{"role":"controller"}"#).unwrap_err();
        assert!(
            err.message().contains("requires \"kubeconfig\""),
            "{}",
            err.message()
        );
        for extra in [
            r#""nodeName":"n""#,
            r#""rootDir":"/r""#,
            r#""pluginWatcher":true"#,
        ] {
            let json = format!(r#"{{"role":"controller","kubeconfig":"/k",{extra}}}"#);
            let err = HostConfig::from_json(&json).unwrap_err();
            let key = extra.split('"').nth(1).unwrap();
            assert!(err.message().contains(key), "{}", err.message());
        }
        let err = HostConfig::from_json(r#"{"role":"scheduler","kubeconfig":"/k"}"#).unwrap_err();
        assert!(err.message().contains("scheduler"), "{}", err.message());
        let c = HostConfig::from_json(r#"{"role":"node","nodeName":"n","rootDir":"/r"}"#).unwrap();
        assert!(!c.is_controller());
    }

    #[test]
    fn config_rejects_unknown_gate() {
        let err = HostConfig::from_json(
            r#"{"nodeName":"n","rootDir":"/r","featureGates":{"Nope":true}}"#,
        )
        .unwrap_err();
        assert!(err.message().contains("Nope"));
    }
}
