//! The kubelet side the command line stands up: a standalone kcsi host whose config carries a
//! CSIDriver stand-in, the volume as kcsi's plain spec, and the pod it is published to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kcsi::Host;
use kcsi::HostConfig;
use kcsi::NodeAgent;
use kcsi::VolumeSpec;
use serde_json::{json, Value};

use crate::args::{DriverArgs, VolumeArgs};
use crate::UsageError;

/// Everything about the volume the steps need.
#[derive(Clone)]
pub struct Volume {
    pub driver: String,
    pub handle: String,
    pub spec_name: String,
    pub pod_uid: String,
    pub block: bool,
    pub read_only: bool,
    pub fs_group: Option<i64>,
    /// The SELinux label the volume manager mounts it with (`-o context`), when the CSIDriver
    /// has seLinuxMount and the pod's label applies to the volume.
    pub se_linux_label: Option<String>,
    pub spec: VolumeSpec,
}

/// The spec name a handle gets when none is given: PV names cannot hold every handle (`/`).
pub fn spec_name_for(handle: &str) -> String {
    format!("kcsi-{}", &kcsi::sha256_hex(&[handle])[..16])
}

pub fn node_name(given: &Option<String>) -> String {
    if let Some(n) = given {
        return n.clone();
    }
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|b| *b == 0).unwrap_or(0);
    match std::str::from_utf8(&buf[..len]) {
        Ok(n) if rc == 0 && !n.is_empty() => n.to_string(),
        _ => "kcsi-node".to_string(),
    }
}

fn read_json(what: &str, path: &Path) -> Result<Value, UsageError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{what}: cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("{what}: {} is not JSON: {e}", path.display())))
}

/// The CSIDriver stand-in: the given object, or one that needs attach only when a publish
/// context was given.
pub fn csidriver(
    args: &DriverArgs,
    driver: &str,
    attach_required: bool,
) -> Result<Value, UsageError> {
    let Some(path) = &args.csidriver else {
        return Ok(
            json!({"metadata": {"name": driver}, "spec": {"attachRequired": attach_required}}),
        );
    };
    let obj = read_json("--csidriver", path)?;
    let name = obj.pointer("/metadata/name").and_then(Value::as_str);
    if name != Some(driver) {
        return Err(UsageError(format!(
            "--csidriver: {} names CSIDriver {name:?}, but the driver is {driver:?}",
            path.display()
        )));
    }
    Ok(obj)
}

/// A standalone host rooted at `root`, with its node agent (registration needs it).
pub fn host(
    root: &Path,
    node: &str,
    timeout: f64,
    csidriver: Option<&Value>,
) -> Result<NodeAgent, UsageError> {
    let csi_drivers = match csidriver {
        Some(d) => vec![serde_json::from_value(d.clone())
            .map_err(|e| UsageError(format!("the CSIDriver stand-in is not valid: {e}")))?],
        None => Vec::new(),
    };
    let config = HostConfig {
        timeout: Duration::try_from_secs_f64(timeout).map_err(|_| {
            UsageError(format!(
                "--timeout {timeout}: must be > 0 and at most 86400"
            ))
        })?,
        csi_drivers,
        ..HostConfig::node(node, root)
    };
    // NodeAgent::new checks the config.
    NodeAgent::new(config).map_err(|e| UsageError(e.message().to_string()))
}

/// Whether the host's CSIDriver stand-in requires attach.
pub fn attach_required(host: &Host, driver: &str) -> bool {
    host.driver_facts(driver)
        .map(|f| f.attach_required)
        .unwrap_or(true)
}

pub fn volume(
    driver: &str,
    handle: &str,
    v: &VolumeArgs,
    extra_attributes: &BTreeMap<String, String>,
    attach_required: bool,
) -> Result<Volume, UsageError> {
    let spec_name = v.name.clone().unwrap_or_else(|| spec_name_for(handle));
    let mut attributes = extra_attributes.clone();
    attributes.extend(v.attributes.iter().cloned());
    let mut csi = json!({
        "driver": driver,
        "volumeHandle": handle,
        "specName": spec_name,
        "volumeAttributes": attributes,
        "accessMode": v.access_mode,
        "volumeMode": if v.block { "Block" } else { "Filesystem" },
        "mountOptions": v.mount_options,
        "readOnly": v.read_only,
    });
    if let Some(t) = &v.fs_type {
        csi["fsType"] = json!(t);
    }
    if let Some(s) = &v.secrets {
        csi["secretsFile"] = json!(absolute("--secrets", s)?);
    }
    if attach_required {
        let context: BTreeMap<&str, &str> = v
            .publish_context
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        csi["publishContext"] = json!(context);
    }
    let spec: VolumeSpec = serde_json::from_value(json!({ "csi": csi }))
        .map_err(|e| UsageError(format!("the volume is not valid: {e}")))?;
    Ok(Volume {
        driver: driver.to_string(),
        handle: handle.to_string(),
        spec_name,
        pod_uid: v.pod_uid.clone(),
        block: v.block,
        read_only: v.read_only,
        fs_group: v.fs_group,
        se_linux_label: None,
        spec,
    })
}

pub fn absolute(what: &str, p: &Path) -> Result<PathBuf, UsageError> {
    std::path::absolute(p).map_err(|e| UsageError(format!("{what}: {}: {e}", p.display())))
}

/// The secrets file's content, read once up front so a bad file is bad input.
pub fn secrets_file(v: &VolumeArgs) -> Result<kcsi::SecretsFile, UsageError> {
    match &v.secrets {
        None => Ok(Default::default()),
        Some(p) => kcsi::SecretsFile::load(p)
            .map_err(|e| UsageError(format!("--secrets: {}", e.message()))),
    }
}

pub fn pod(uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "kcsi", "namespace": "default", "uid": uid},
        "spec": {"containers": []},
    }))
    .unwrap_or_default()
}
