//! What the kubelet reads from a driver's CSIDriver object, with the API server's defaults
//! applied and upstream's behaviour when no object exists.

use k8s_openapi::api::storage::v1::{CSIDriver, TokenRequest};

use crate::error::{Error, Result};
use crate::host::Host;
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
}
