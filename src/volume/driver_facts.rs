//! What the kubelet reads from a driver's CSIDriver object, with the API server's defaults
//! applied and upstream's behaviour when no object exists.

use std::sync::atomic::AtomicU64;

use k8s_openapi::api::storage::v1::{CSIDriver, TokenRequest};

use crate::error::{Error, ErrorKind, Result};
use crate::host::Host;
use crate::kube::csidriver_informer::CsiDriverFeed;
use crate::spec::LifecycleMode;

/// The API server's default token lifetime for `tokenRequests`.
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsGroupPolicy {
    ReadWriteOnceWithFsType,
    File,
    None,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DriverFacts {
    pub name: String,
    /// Whether a CSIDriver object exists; without one upstream uses the defaults below.
    pub exists: bool,
    pub attach_required: bool,
    pub pod_info_on_mount: bool,
    pub requires_republish: bool,
    pub fs_group_policy: FsGroupPolicy,
    pub lifecycle_modes: Vec<String>,
    pub se_linux_mount: bool,
    pub token_requests: Vec<TokenRequest>,
    pub service_account_token_in_secrets: bool,
}

impl DriverFacts {
    /// Facts for `name` from its CSIDriver object, if any. Missing fields get the API server's
    /// defaults (objects from a host config were never defaulted by an API server).
    pub fn new(name: &str, object: Option<&CSIDriver>) -> Result<DriverFacts> {
        let Some(obj) = object else {
            return Ok(DriverFacts {
                name: name.to_string(),
                exists: false,
                attach_required: true,
                pod_info_on_mount: false,
                requires_republish: false,
                fs_group_policy: FsGroupPolicy::ReadWriteOnceWithFsType,
                lifecycle_modes: vec![LifecycleMode::Persistent.as_str().to_string()],
                se_linux_mount: false,
                token_requests: Vec::new(),
                service_account_token_in_secrets: false,
            });
        };
        let spec = &obj.spec;
        let fs_group_policy = match spec.fs_group_policy.as_deref() {
            None => FsGroupPolicy::ReadWriteOnceWithFsType,
            Some("ReadWriteOnceWithFSType") => FsGroupPolicy::ReadWriteOnceWithFsType,
            Some("File") => FsGroupPolicy::File,
            Some("None") => FsGroupPolicy::None,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "CSIDriver {name:?} has fsGroupPolicy {other:?}; expected ReadWriteOnceWithFSType, File or None"
                )))
            }
        };
        let token_requests = spec
            .token_requests
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|mut t| {
                t.expiration_seconds
                    .get_or_insert(DEFAULT_TOKEN_EXPIRATION_SECONDS);
                t
            })
            .collect();
        Ok(DriverFacts {
            name: name.to_string(),
            exists: true,
            attach_required: attach_required(object),
            pod_info_on_mount: spec.pod_info_on_mount.unwrap_or(false),
            requires_republish: requires_republish(object),
            fs_group_policy,
            lifecycle_modes: spec
                .volume_lifecycle_modes
                .clone()
                .unwrap_or_else(|| vec![LifecycleMode::Persistent.as_str().to_string()]),
            se_linux_mount: spec.se_linux_mount.unwrap_or(false),
            token_requests,
            service_account_token_in_secrets: spec
                .service_account_token_in_secrets
                .unwrap_or(false),
        })
    }

    /// `supportsVolumeLifecycleMode`, with upstream's messages.
    pub fn check_lifecycle_mode(&self, mode: LifecycleMode) -> Result<()> {
        if !self.exists {
            if mode == LifecycleMode::Ephemeral {
                return Err(Error::invalid(format!(
                    "volume mode \"Ephemeral\" not supported by driver {} (no CSIDriver object)",
                    self.name
                )));
            }
            return Ok(());
        }
        if self.lifecycle_modes.iter().any(|m| m == mode.as_str()) {
            return Ok(());
        }
        let quoted: Vec<String> = self
            .lifecycle_modes
            .iter()
            .map(|m| format!("{m:?}"))
            .collect();
        Err(Error::invalid(format!(
            "volume mode {:?} not supported by driver {} (only supports [{}])",
            mode.as_str(),
            self.name,
            quoted.join(" ")
        )))
    }
}

/// `attachRequired`, true without an object (upstream `csi_plugin.go skipAttach`).
pub fn attach_required(object: Option<&CSIDriver>) -> bool {
    object.is_none_or(|o| o.spec.attach_required.unwrap_or(true))
}

/// `requiresRepublish`, false without an object.
pub fn requires_republish(object: Option<&CSIDriver>) -> bool {
    object.is_some_and(|o| o.spec.requires_republish.unwrap_or(false))
}

// Here rather than in host.rs: the host is the layer below the volume operations and names
// none of their types.
impl Host {
    /// The CSIDriver facts for `driver`: from the watched CSIDriver objects, or on standalone
    /// hosts from their config.
    pub fn driver_facts(&self, driver: &str) -> Result<DriverFacts> {
        self.with_csidriver(driver, |object| DriverFacts::new(driver, object))?
    }

    /// Grows (release order) after every change to the CSIDriver objects the facts come from;
    /// never, for a host config's objects. An answer cached with the value read before asking
    /// is current while the value has not moved.
    pub fn csidriver_generation(&self) -> &AtomicU64 {
        match &self.kube {
            Some(kube) => kube.csidrivers.generation(),
            None => &self.config_generation,
        }
    }

    /// The feed of a `"csiDriversFromHost"` host, or why `call` cannot feed this one.
    fn csidriver_feed(&self, call: &str) -> Result<&CsiDriverFeed> {
        self.kube
            .as_ref()
            .and_then(|k| k.csidriver_feed.as_ref())
            .ok_or_else(|| {
                let source = if self.kube.is_some() {
                    "lists and watches the CSIDriver objects itself"
                } else {
                    "runs standalone: its CSIDriver objects are its config's \"csiDrivers\""
                };
                Error::new(
                    ErrorKind::FailedPrecondition,
                    format!("{call}: this host {source}; only a host made with \"csiDriversFromHost\": true (and a \"kubeconfig\") takes them from its program"),
                )
            })
    }

    /// A CSIDriver object the host program's informer added or updated
    /// (`"csiDriversFromHost"` hosts).
    pub fn apply_csidriver(&self, object: CSIDriver) -> Result<()> {
        const CALL: &str = "kcsi_host_csidriver_apply";
        let feed = self.csidriver_feed(CALL)?;
        if object.metadata.name.as_deref().unwrap_or("").is_empty() {
            return Err(Error::invalid(format!(
                "{CALL}: the CSIDriver has no metadata.name"
            )));
        }
        feed.apply(object);
        Ok(())
    }

    /// The CSIDriver `name` deleted from the host program's informer; NOT_FOUND when kcsi
    /// did not have it (nothing changes then).
    pub fn delete_csidriver(&self, name: &str) -> Result<()> {
        const CALL: &str = "kcsi_host_csidriver_delete";
        if self.csidriver_feed(CALL)?.delete(name) {
            return Ok(());
        }
        Err(Error::not_found(format!(
            "{CALL}: there is no CSIDriver {name:?} to delete"
        )))
    }

    /// The host program's informer has synced (it fed every CSIDriver object it listed):
    /// lookups stop waiting for the first list.
    pub fn csidrivers_synced(&self) -> Result<()> {
        self.csidriver_feed("kcsi_host_csidrivers_synced")?.synced();
        Ok(())
    }

    /// `read` of the CSIDriver object of `driver` (or `None`), without building all its facts:
    /// the kubelet's reconciler asks CanAttach and RequiresRemount of every volume every 100 ms.
    pub fn with_csidriver<T>(
        &self,
        driver: &str,
        read: impl FnOnce(Option<&CSIDriver>) -> T,
    ) -> Result<T> {
        if let Some(kube) = &self.kube {
            return Ok(read(kube.csidrivers.get(driver)?.as_deref()));
        }
        Ok(read(
            self.config
                .csi_drivers
                .iter()
                .find(|d| d.metadata.name.as_deref() == Some(driver)),
        ))
    }
}
