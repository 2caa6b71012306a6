//! Host configuration: what a host program asks of kcsi, typed and checked (the C API's
//! `kcsi_host_new` reads it from JSON in `ffi::config`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::storage::v1::CSIDriver;

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

/// Which half of upstream's CSI plugin a host is: the kubelet's (`"node"`, the default) or
/// the attach/detach controller's (`"controller"`, in the kube-controller-manager).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    #[default]
    Node,
    Controller,
}

/// `"kubeconfigData"`: a kubeconfig document held in memory, for a program whose credentials
/// live there (the Go binding's relay to the VolumeHost's own client). Its `Debug` never
/// prints the document: it holds a credential.
#[derive(Clone, PartialEq, Eq)]
pub struct KubeconfigData(pub String);

impl std::fmt::Debug for KubeconfigData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KubeconfigData(<{} bytes>)", self.0.len())
    }
}

/// Where a host's API server and credentials come from.
#[derive(Clone, Copy, Debug)]
pub enum KubeconfigSource<'a> {
    /// `"kubeconfig"`: a file, read when the host is made.
    File(&'a std::path::Path),
    /// `"kubeconfigData"`.
    Data(&'a KubeconfigData),
}

/// A host's settings. Start from [`HostConfig::node`] or [`HostConfig::controller`] (or
/// `Default`), set what differs, and [`HostConfig::check`] it: the checks `kcsi_host_new`
/// runs on its JSON, with the same messages (they name the JSON keys of the C API's config).
#[derive(Clone, Debug)]
pub struct HostConfig {
    pub role: Role,
    /// Empty on a controller host (it serves every node).
    pub node_name: String,
    /// Empty on a controller host (it has no volumes on disk).
    pub root_dir: PathBuf,
    pub kubeconfig: Option<PathBuf>,
    /// Instead of `kubeconfig`, the document itself (`"kubeconfigData"`).
    pub kubeconfig_data: Option<KubeconfigData>,
    pub timeout: Duration,
    /// A driver connection unused this long is closed (`"idleConnectionSeconds"`).
    pub idle_connection: Duration,
    pub feature_gates: BTreeMap<String, bool>,
    /// Standalone mode's stand-ins for the API's CSIDriver objects.
    pub csi_drivers: Vec<CSIDriver>,
    /// The host program keeps kcsi's CSIDriver objects current (`"csiDriversFromHost"`, from
    /// an informer it already runs) instead of kcsi listing and watching them itself.
    pub csi_drivers_from_host: bool,
    /// A controller host's program keeps kcsi's VolumeAttachment objects current
    /// (`"volumeAttachmentsFromHost"`, from the attach/detach controller's informer) instead
    /// of kcsi listing and watching them itself.
    pub volume_attachments_from_host: bool,
    /// Whether the host runs the kubelet's plugin watcher (`"pluginWatcher"`).
    pub plugin_watcher: bool,
    /// The watched directory when not `<rootDir>/plugins_registry` (`"pluginsRegistryDir"`).
    pub plugins_registry_dir: Option<PathBuf>,
}

impl Default for HostConfig {
    /// A node host without its (required) name and root, with the kubelet's timeouts.
    fn default() -> HostConfig {
        HostConfig {
            role: Role::Node,
            node_name: String::new(),
            root_dir: PathBuf::new(),
            kubeconfig: None,
            kubeconfig_data: None,
            timeout: DEFAULT_TIMEOUT,
            idle_connection: DEFAULT_IDLE_CONNECTION,
            feature_gates: BTreeMap::new(),
            csi_drivers: Vec::new(),
            csi_drivers_from_host: false,
            volume_attachments_from_host: false,
            plugin_watcher: false,
            plugins_registry_dir: None,
        }
    }
}

impl HostConfig {
    /// A node host (the kubelet's half) for `node_name`, with its volumes below `root_dir`.
    pub fn node(node_name: impl Into<String>, root_dir: impl Into<PathBuf>) -> HostConfig {
        HostConfig {
            node_name: node_name.into(),
            root_dir: root_dir.into(),
            ..HostConfig::default()
        }
    }

    /// A controller host (the attach/detach controller's half) on the API server `kubeconfig`
    /// points to.
    pub fn controller(kubeconfig: impl Into<PathBuf>) -> HostConfig {
        HostConfig {
            role: Role::Controller,
            kubeconfig: Some(kubeconfig.into()),
            ..HostConfig::default()
        }
    }

    /// The config if it is one a host can run with, else an error naming the setting (by its
    /// key in the C API's JSON) and why.
    pub fn check(self) -> Result<HostConfig> {
        match self.role {
            Role::Node => self.check_node_identity()?,
            Role::Controller => self.check_controller()?,
        }
        check_seconds("timeoutSeconds", self.timeout)?;
        check_seconds("idleConnectionSeconds", self.idle_connection)?;
        for gate in self.feature_gates.keys() {
            if !KNOWN_GATES.iter().any(|(name, _)| name == gate) {
                let known: Vec<&str> = KNOWN_GATES.iter().map(|(name, _)| *name).collect();
                return Err(Error::invalid(format!(
                    "host config is not valid: unrecognized feature gate {gate:?} in \"featureGates\" (known: {})",
                    known.join(", ")
                )));
            }
        }
        if self.kubeconfig.is_some() && self.kubeconfig_data.is_some() {
            return Err(Error::invalid(
                "host config is not valid: \"kubeconfig\" and \"kubeconfigData\" are both set; give one",
            ));
        }
        if self.api_source().is_some() && !self.csi_drivers.is_empty() {
            return Err(Error::invalid(
                "host config is not valid: \"csiDrivers\" is for standalone mode only; with a \
                 \"kubeconfig\" CSIDriver objects come from the API server",
            ));
        }
        if self.csi_drivers_from_host && self.api_source().is_none() {
            return Err(Error::invalid(
                "host config is not valid: \"csiDriversFromHost\" needs a \"kubeconfig\" or \
                 \"kubeconfigData\"; a standalone host's CSIDriver objects are its \"csiDrivers\"",
            ));
        }
        if self.volume_attachments_from_host
            && (!self.is_controller() || self.api_source().is_none())
        {
            return Err(Error::invalid(
                "host config is not valid: \"volumeAttachmentsFromHost\" is for a controller host \
                 (\"role\": \"controller\") with a \"kubeconfig\" or \"kubeconfigData\"",
            ));
        }
        let mut names = BTreeSet::new();
        for d in &self.csi_drivers {
            let name = d.metadata.name.as_deref().unwrap_or("");
            if name.is_empty() {
                return Err(Error::invalid(
                    "host config is not valid: a CSIDriver in \"csiDrivers\" has no metadata.name",
                ));
            }
            if !names.insert(name) {
                return Err(Error::invalid(format!(
                    "host config is not valid: CSIDriver {name:?} appears twice in \"csiDrivers\""
                )));
            }
        }
        match &self.plugins_registry_dir {
            Some(_) if !self.plugin_watcher => {
                return Err(Error::invalid(
                    "host config is not valid: \"pluginsRegistryDir\" is set but \"pluginWatcher\" is not true",
                ))
            }
            Some(dir) if !is_absolute(dir) => {
                return Err(Error::invalid(format!(
                    "host config is not valid: \"pluginsRegistryDir\" must be an absolute path, got {dir:?}"
                )))
            }
            _ => {}
        }
        Ok(self)
    }

    /// The API server's kubeconfig, as a file or a document; `None` when standalone.
    pub fn api_source(&self) -> Option<KubeconfigSource<'_>> {
        match (&self.kubeconfig, &self.kubeconfig_data) {
            (Some(path), _) => Some(KubeconfigSource::File(path)),
            (None, Some(data)) => Some(KubeconfigSource::Data(data)),
            (None, None) => None,
        }
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

    /// A node host's `nodeName` and `rootDir`, both required.
    fn check_node_identity(&self) -> Result<()> {
        if self.node_name.is_empty() {
            return Err(Error::invalid(
                "host config is not valid: \"nodeName\" is required",
            ));
        }
        check_name("nodeName", &self.node_name)?;
        if self.root_dir.as_os_str().is_empty() {
            return Err(Error::invalid(
                "host config is not valid: \"rootDir\" is required",
            ));
        }
        if !is_absolute(&self.root_dir) {
            return Err(Error::invalid(format!(
                "host config is not valid: \"rootDir\" must be an absolute path, got {:?}",
                self.root_dir
            )));
        }
        Ok(())
    }

    /// A controller host serves every node from the API server: it needs a kubeconfig and has
    /// no node of its own, no volumes on disk and no plugin registry to watch.
    fn check_controller(&self) -> Result<()> {
        if self.api_source().is_none() {
            return Err(Error::invalid(
                "host config is not valid: \"role\": \"controller\" requires \"kubeconfig\" or \"kubeconfigData\"",
            ));
        }
        let node_keys = [
            ("nodeName", !self.node_name.is_empty()),
            ("rootDir", !self.root_dir.as_os_str().is_empty()),
            ("pluginWatcher", self.plugin_watcher),
            ("pluginsRegistryDir", self.plugins_registry_dir.is_some()),
        ];
        if let Some((key, _)) = node_keys.iter().find(|(_, set)| *set) {
            return Err(Error::invalid(format!(
                "host config is not valid: {key:?} is for node hosts; a \"role\": \"controller\" host serves every node and keeps nothing on disk"
            )));
        }
        Ok(())
    }
}

/// An absolute path the kernel can take (no NUL byte).
fn is_absolute(path: &std::path::Path) -> bool {
    path.is_absolute() && !path.as_os_str().as_encoded_bytes().contains(&0)
}

/// A duration setting: in (0, 86400] seconds.
fn check_seconds(key: &str, value: Duration) -> Result<()> {
    if value.is_zero() || value > MAX_TIMEOUT {
        return Err(out_of_range(key, value.as_secs_f64()));
    }
    Ok(())
}

/// The error for a duration setting given as `seconds` outside (0, 86400].
pub fn out_of_range(key: &str, seconds: f64) -> Error {
    Error::invalid(format!(
        "host config is not valid: {key:?} must be > 0 and at most 86400, got {seconds}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> HostConfig {
        HostConfig::node("n", "/r")
    }

    #[test]
    fn config_requires_node_and_absolute_root() {
        let err = HostConfig::node("", "/r").check().unwrap_err();
        assert!(
            err.message().contains("\"nodeName\" is required"),
            "{}",
            err.message()
        );
        let err = HostConfig::node("n", "rel").check().unwrap_err();
        assert!(err.message().contains("absolute"), "{}", err.message());
        let c = node().check().unwrap();
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        assert_eq!(c.idle_connection, DEFAULT_IDLE_CONNECTION);
    }

    #[test]
    fn config_refuses_a_zero_or_too_long_duration_naming_the_key() {
        let zero = HostConfig {
            idle_connection: Duration::ZERO,
            ..node()
        };
        let err = zero.check().unwrap_err();
        assert!(
            err.message()
                .contains("\"idleConnectionSeconds\" must be > 0"),
            "{}",
            err.message()
        );
        let long = HostConfig {
            timeout: MAX_TIMEOUT + Duration::from_secs(1),
            ..node()
        };
        let err = long.check().unwrap_err();
        assert!(
            err.message().contains("\"timeoutSeconds\""),
            "{}",
            err.message()
        );
    }

    #[test]
    fn config_takes_plugin_watcher_and_refuses_a_stray_or_relative_registry_dir() {
        let watched = HostConfig {
            plugin_watcher: true,
            plugins_registry_dir: Some(PathBuf::from("/reg")),
            ..node()
        };
        assert!(watched.clone().check().is_ok());
        let stray = HostConfig {
            plugin_watcher: false,
            ..watched.clone()
        };
        let err = stray.check().unwrap_err();
        assert!(err.message().contains("pluginWatcher"), "{}", err.message());
        let relative = HostConfig {
            plugins_registry_dir: Some(PathBuf::from("reg")),
            ..watched
        };
        let err = relative.check().unwrap_err();
        assert!(err.message().contains("absolute"), "{}", err.message());
    }

    #[test]
    fn gates_default_as_in_kubernetes_1_36_unless_set() {
        let c = node();
        assert!(c.gate("SELinuxMountReadWriteOncePod"));
        assert!(c.gate("MutableCSINodeAllocatableCount"));
        assert!(c.gate("CSIMigrationPortworx"));
        assert!(!c.gate("SELinuxMount"));
        assert!(!c.gate("CSIVolumeHealth"));
        let c = HostConfig {
            feature_gates: [
                ("CSIMigrationPortworx".to_string(), false),
                ("CSIVolumeHealth".to_string(), true),
            ]
            .into(),
            ..node()
        };
        assert!(!c.gate("CSIMigrationPortworx"));
        assert!(c.gate("CSIVolumeHealth"));
    }

    #[test]
    fn controller_role_requires_kubeconfig_and_refuses_node_keys() {
        let c = HostConfig::controller("/k").check().unwrap();
        assert!(c.is_controller());
        assert_eq!(c.node_name, "");
        let no_kubeconfig = HostConfig {
            kubeconfig: None,
            ..HostConfig::controller("/k")
        };
        let err = no_kubeconfig.check().unwrap_err();
        assert!(
            err.message().contains("requires \"kubeconfig\""),
            "{}",
            err.message()
        );
        let node_keys = [
            (
                "nodeName",
                HostConfig {
                    node_name: "n".into(),
                    ..HostConfig::controller("/k")
                },
            ),
            (
                "rootDir",
                HostConfig {
                    root_dir: "/r".into(),
                    ..HostConfig::controller("/k")
                },
            ),
            (
                "pluginWatcher",
                HostConfig {
                    plugin_watcher: true,
                    ..HostConfig::controller("/k")
                },
            ),
        ];
        for (key, config) in node_keys {
            let err = config.check().unwrap_err();
            assert!(err.message().contains(key), "{}", err.message());
        }
        assert!(!node().check().unwrap().is_controller());
    }

    #[test]
    fn config_rejects_unknown_gate() {
        let c = HostConfig {
            feature_gates: [("Nope".to_string(), true)].into(),
            ..node()
        };
        assert!(c.check().unwrap_err().message().contains("Nope"));
    }
}
