//! Node-side volume expansion (upstream `expander.go`): NodeExpandVolume with upstream's error
//! mapping, after the controller has grown the volume.

use serde::Deserialize;
use tonic::Code;

use crate::csi::proto::csi;
use crate::error::{Error, ErrorClass, ErrorKind, Result};
use crate::host::Host;
use crate::spec::VolumeSpec;
use crate::volume::capability::{volume_capability, FS_TYPE_BLOCK};
use crate::volume::operation::Operation;
use crate::volume::quantity;

/// Upstream `NodeResizeOptions`, as `kcsi_node_expand` takes it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExpandOptions {
    pub spec: VolumeSpec,
    #[serde(default)]
    pub device_path: String,
    #[serde(default)]
    pub device_mount_path: String,
    #[serde(default)]
    pub device_stage_path: String,
    pub new_size: String,
    /// Checked for form only; upstream does not send it either.
    #[serde(default)]
    pub old_size: Option<String>,
}

/// `NodeExpand`: true once the driver expanded the volume on this node.
///
/// Errors: driver not registered → transient; everything after that is final, as upstream
/// (`nodeExpandWithClient` wraps every error with `fmt.Errorf`, so the kubelet's
/// `IsOperationFinishedError` is true, it marks the expansion failed and sets the PVC
/// condition): an unreadable NodeExpandSecretRef, a failed capability probe, and every gRPC
/// code, Canceled / DeadlineExceeded / Unavailable / ResourceExhausted / Aborted included.
/// Driver without EXPAND_VOLUME → `NotSupported`; gRPC FailedPrecondition → the volume is in
/// use (the code stays on the error); InvalidArgument, OutOfRange, NotFound → "infeasible"
/// (don't retry as is).
pub async fn node_expand(host: &Host, opts: &ExpandOptions) -> Result<bool> {
    let new_size = quantity::parse_bytes(&opts.new_size).map_err(|e| e.context("newSize"))?;
    if let Some(old) = &opts.old_size {
        quantity::parse_bytes(old).map_err(|e| e.context("oldSize"))?;
    }
    let src = opts.spec.persistent_source().map_err(|e| {
        e.context(csi_log!(
            "Expander.NodeExpand failed to get CSI persistent source"
        ))
    })?;
    let (driver, volume) = (&src.driver, &src.volume_handle);
    tracing::debug!(
        driver,
        volume,
        "{}",
        csi_log!("Expander.NodeExpand({})", opts.device_mount_path)
    );
    let op = Operation::start(
        host,
        &src.driver,
        &csi_log!("Expander.NodeExpand failed to get CSI client"),
    )?
    .migrated(opts.spec.migrated);
    let caps = op.capabilities().await.map_err(|e| {
        e.context(csi_log!(
            "Expander.NodeExpand failed to check if node supports expansion "
        ))
        .with_class(ErrorClass::Final)
    })?;
    if !caps.expand_volume {
        return Err(Error::new(
            ErrorKind::NotSupported,
            format!(
                "NodeExpand is not supported by the CSI driver {}",
                src.driver
            ),
        ));
    }
    let secrets = op
        .secrets(
            &opts.spec,
            "NodeExpandSecretRef",
            src.node_expand_secret_ref.as_ref(),
        )
        .await
        .map_err(|e| e.with_class(ErrorClass::Final))?;
    let (volume_path, fs_type) = if opts.spec.is_block() {
        (opts.device_path.clone(), FS_TYPE_BLOCK.to_string())
    } else {
        (
            opts.device_mount_path.clone(),
            src.fs_type.clone().unwrap_or_default(),
        )
    };
    let access_mode = opts
        .spec
        .access_modes()
        .first()
        .map_or("ReadWriteOnce", String::as_str);
    let req = csi::NodeExpandVolumeRequest {
        volume_id: src.volume_handle.clone(),
        volume_path,
        capacity_range: Some(csi::CapacityRange {
            required_bytes: new_size,
            limit_bytes: 0,
        }),
        staging_target_path: opts.device_stage_path.clone(),
        volume_capability: Some(volume_capability(
            access_mode,
            &caps,
            &fs_type,
            opts.spec.mount_options().to_vec(),
            None,
        )),
        secrets,
    };
    match op.client().node_expand(req, op.deadline).await {
        Ok(_) => Ok(true),
        Err(e) => Err(expand_error(e)),
    }
}

/// kcsi's message keeps the CSI client's context and tags the infeasible case (the C API has
/// no class for it); upstream's wording (`nodeExpandWithClient`) is kept beside it.
fn expand_error(e: Error) -> Error {
    const FAILED: &str = "Expander.NodeExpand failed to expand the volume";
    let e = e.with_class(ErrorClass::Final);
    let driver_text = e.upstream_message().to_string();
    match e.grpc_code().map(Code::from_i32) {
        Some(Code::InvalidArgument | Code::OutOfRange | Code::NotFound) => e
            .prefix(csi_log!("{FAILED} (infeasible) "))
            .with_upstream_message(format!("{FAILED} {driver_text}")),
        _ => e
            .context(csi_log!("{FAILED} "))
            .with_upstream_message(format!("{FAILED} : {driver_text}")),
    }
}
