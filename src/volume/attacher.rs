//! The kubelet side of upstream's `csiAttacher`: WaitForAttach, GetDeviceMountPath, MountDevice
//! (NodeStageVolume) and UnmountDevice (NodeUnstageVolume), in upstream's order and with its
//! error classes. Attach and Detach belong to the attach/detach controller, not the kubelet.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::disk::beneath::Entry;
use crate::disk::files::OpenFiles;
use crate::disk::inventory::{self, Kind};
use crate::disk::paths::attachment_name;
use crate::disk::volume_data::{self, keys, VolumeData};
use crate::error::{Error, ErrorClass, ErrorKind, Result};
use crate::goquote::quote;
use crate::host::Host;
use crate::spec::VolumeSpec;
use crate::volume::block::BlockUnmapper;
use crate::volume::capability::volume_capability;
use crate::volume::operation::{standalone_hint, with_dir_sync, Operation};

/// Upstream `DeviceMounterArgs`: `{"fsGroup": int, "seLinuxLabel": string}`, both optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MountDeviceArgs {
    #[serde(default)]
    pub fs_group: Option<i64>,
    #[serde(default)]
    pub se_linux_label: Option<String>,
}

/// `WaitForAttach`: one GET of the VolumeAttachment `csi-<sha256(handle+driver+node)>`,
/// returning its name (the "device path" the kubelet passes on).
///
/// Like upstream since kubernetes/kubernetes#124398 this reads once and does not poll: the
/// kubelet's volume manager already retries WaitForAttach with backoff, and polling here would
/// hold a kubelet worker for the whole timeout while the external attacher is slow. The
/// timeout bounds that one read; a plain spec with a publish context needs no read. Classes
/// (upstream's errors are untyped, so the operation executor retries them all alike): a failed
/// GET and "not attached yet" are transient — they change on their own; an attach error and an
/// attachment being deleted are final.
pub async fn wait_for_attach(host: &Host, spec: &VolumeSpec, timeout: Duration) -> Result<String> {
    let src = spec
        .persistent_source()
        .map_err(|e| e.context(csi_log!("attacher.WaitForAttach failed")))?;
    let name = attachment_name(&src.volume_handle, &src.driver, &host.config().node_name);
    if spec
        .plain
        .as_ref()
        .is_some_and(|p| p.publish_context.is_some())
    {
        // A plain spec's publish context stands in for an attached VolumeAttachment.
        return Ok(name);
    }
    let volume = &src.volume_handle;
    let va = match tokio::time::timeout(timeout, host.volume_attachment(&name)).await {
        Ok(Ok(va)) => va,
        Ok(Err(e)) => {
            let e = e.context(format!("volume {volume} has GET error for volume attachment {name}"));
            return Err(standalone_hint(host, &src.driver, e).transient());
        }
        Err(_) => {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!("volume {volume} has GET error for volume attachment {name}: no answer within {timeout:?}"),
            )
            .transient())
        }
    };
    if va.metadata.deletion_timestamp.is_some() {
        return Err(Error::new(
            ErrorKind::FailedPrecondition,
            "volume attachment is being deleted",
        ));
    }
    let status = va.status.unwrap_or_default();
    if status.attached {
        return Ok(va.metadata.name.unwrap_or(name));
    }
    if let Some(message) = status.attach_error.and_then(|e| e.message) {
        return Err(Error::new(ErrorKind::FailedPrecondition, message));
    }
    Err(Error::new(
        ErrorKind::FailedPrecondition,
        format!("volume {volume} is not attached for volume attachment {name}"),
    )
    .transient())
}

/// `GetDeviceMountPath`: `<root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`.
pub fn device_mount_path(host: &Host, spec: &VolumeSpec) -> Result<PathBuf> {
    let src = spec
        .persistent_source()
        .map_err(|e| e.context(csi_log!("attacher.GetDeviceMountPath failed")))?;
    host.layout()
        .device_mount_path(&src.driver, &src.volume_handle)
}

/// Refuses a device mount path that is not a clean absolute path under the plugin directory:
/// MountDevice creates it and may remove it and its parent again.
fn check_device_mount_path(host: &Host, what: &str, p: &Path) -> Result<PathBuf> {
    if p.as_os_str().is_empty() {
        return Err(Error::invalid(csi_log!(
            "{what} failed, deviceMountPath is empty"
        )));
    }
    let plugin_dir = host.layout().plugin_dir();
    let clean = p
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !p.is_absolute()
        || !clean
        || !p.starts_with(&plugin_dir)
        || p.parent() == Some(plugin_dir.as_path())
    {
        return Err(Error::invalid(csi_log!(
            "{what} failed, deviceMountPath {} is not a clean absolute path below {}",
            quote(&p.to_string_lossy()),
            plugin_dir.display()
        )));
    }
    Ok(p.to_path_buf())
}

/// The SELinux `context="<label>"` mount option, when the feature gate is on, the driver's
/// CSIDriver says `seLinuxMount: true` and the label is not empty (never `context=""`).
fn selinux_mount_option(host: &Host, driver: &str, label: Option<&str>) -> Result<Option<String>> {
    let Some(label) = label.filter(|l| !l.is_empty()) else {
        return Ok(None);
    };
    if !host.config().gate("SELinuxMountReadWriteOncePod") {
        return Ok(None);
    }
    let facts = host
        .driver_facts(driver)
        .map_err(|e| e.context(csi_log!("failed to query for SELinuxMount support")))?;
    Ok(facts
        .se_linux_mount
        .then(|| format!("context={}", quote(label))))
}

/// `MountDevice`: records the global `vol_data.json` and stages the volume at
/// `device_mount_path` (NodeStageVolume) when the driver has STAGE_UNSTAGE_VOLUME.
pub async fn mount_device(
    host: &Host,
    spec: &VolumeSpec,
    device_mount_path: &Path,
    args: &MountDeviceArgs,
) -> Result<()> {
    let dmp = check_device_mount_path(host, "attacher.MountDevice", device_mount_path)?;
    let data_dir = dmp.parent().unwrap_or(&dmp);
    let _volume = host.volume_locks().lock(data_dir).await;
    let src = spec.persistent_source().map_err(|e| {
        e.context(csi_log!(
            "attacher.MountDevice failed to get CSIPersistentVolumeSource"
        ))
    })?;
    let (driver, volume) = (&src.driver, &src.volume_handle);
    tracing::debug!(
        driver,
        volume,
        "{}",
        csi_log!("attacher.MountDevice({})", dmp.display())
    );
    let op = Operation::start(
        host,
        &src.driver,
        &csi_log!("attacher.MountDevice failed to create newCsiDriverClient"),
    )?
    .migrated(spec.migrated);
    let caps = op.capabilities().await?;
    let publish_context = op
        .publish_context(spec, &src.volume_handle)
        .await?
        .unwrap_or_default();
    let secrets = if caps.stage_unstage {
        op.secrets(
            spec,
            "NodeStageSecretRef",
            src.node_stage_secret_ref.as_ref(),
        )
        .await?
    } else {
        HashMap::new()
    };
    let mut mount_flags = spec.mount_options().to_vec();
    let selinux = selinux_mount_option(host, &src.driver, args.se_linux_label.as_deref())?;
    mount_flags.extend(selinux.clone());

    let files = host.files().open()?;
    let mut data = VolumeData::new();
    data.insert(keys::VOLUME_HANDLE.into(), src.volume_handle.clone());
    data.insert(keys::DRIVER_NAME.into(), src.driver.clone());
    if selinux.is_some() {
        data.insert(
            keys::SELINUX_MOUNT_CONTEXT.into(),
            args.se_linux_label.clone().unwrap_or_default(),
        );
    }
    let (made, staged) = files.make_dirs_and_stage(data_dir, &data).await;
    made.map_err(|e| e.context(csi_log!("attacher.MountDevice")))?;
    let synced = match staged.and_then(|s| files.place(s)) {
        Ok(sync) => sync,
        Err(e) => {
            cleanup_global_mount(&files, &dmp);
            return Err(e.context(csi_log!("failed to save volume info data")));
        }
    };
    // The global mount dir only after the file, so a volume without the file never has one
    // that kcsi made (see `OpenFiles::only_leftovers`).
    if let Err(e) = files.make_dirs(&dmp) {
        cleanup_global_mount(&files, &dmp);
        return Err(e.context(csi_log!("attacher.MountDevice")));
    }
    if !caps.stage_unstage {
        synced
            .wait()
            .map_err(|e| e.context(csi_log!("failed to save volume info data")))?;
        tracing::info!("{}", csi_log!("attacher.MountDevice STAGE_UNSTAGE_VOLUME capability not set. Skipping MountDevice..."));
        return Ok(());
    }

    let access_mode = spec
        .access_modes()
        .first()
        .map_or("ReadWriteOnce", String::as_str);
    let fs_group = if caps.volume_mount_group {
        args.fs_group
    } else {
        None
    };
    let fs_type = src.fs_type.clone().unwrap_or_default();
    let capability = volume_capability(access_mode, &caps, &fs_type, mount_flags, fs_group);
    // The driver resolves the path itself: a symlink swapped in since must not lead it out.
    files
        .beneath()
        .check_no_symlink(&dmp, &csi_log!("attacher.MountDevice"))?;
    let stage = op.node_stage(src, &dmp, publish_context, capability, secrets);
    if let Err(e) = with_dir_sync(synced, stage).await {
        if !e.is_uncertain() {
            cleanup_global_mount(&files, &dmp);
        }
        return Err(e);
    }
    tracing::debug!(
        driver,
        volume,
        "{}",
        csi_log!(
            "attacher.MountDevice successfully requested NodeStageVolume [{}]",
            dmp.display()
        )
    );
    Ok(())
}

/// After a final MountDevice error: globalmount, vol_data.json and the sha dir go, unless
/// something is mounted there (then they are needed to unmount it later).
fn cleanup_global_mount(files: &OpenFiles, dmp: &Path) {
    if let Err(e) = files.remove_mount_dir(dmp) {
        tracing::error!(
            "{}",
            csi_log!(
                "attacher.MountDevice failed to remove mount dir after error [{}]: {e}",
                dmp.display()
            )
        );
    }
}

/// `UnmountDevice`: NodeUnstageVolume with what the global `vol_data.json` recorded, then
/// removal of the global mount dir. Without the file NodeUnstage is skipped, as upstream; kcsi
/// still removes what an interrupted MountDevice or UnmountDevice left (a dir of temp files
/// only), so the operation can be retried to the end. A global mount dir without the file is
/// left for `kcsi_list_device_mounts` and UnmountDevice by handle.
pub async fn unmount_device(host: &Host, device_mount_path: &Path) -> Result<()> {
    let dmp = check_device_mount_path(host, "attacher.UnmountDevice", device_mount_path)?;
    let data_dir = dmp.parent().unwrap_or(&dmp);
    let _volume = host.volume_locks().lock(data_dir).await;
    let files = host.files().open()?;
    let data = match files.load(data_dir) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            tracing::info!(
                "{}",
                csi_log!("attacher.UnmountDevice skipped because volume data file is missing: {e}")
            );
            if files.only_leftovers(data_dir, None)? {
                remove_global_mount(&files, &dmp)?;
            }
            return Ok(());
        }
        Err(e) => {
            return Err(e.context(csi_log!(
                "attacher.UnmountDevice failed to get driver and volume name"
            )))
        }
    };
    let driver_name = volume_data::get(&data, keys::DRIVER_NAME, data_dir)?;
    let volume_handle = volume_data::get(&data, keys::VOLUME_HANDLE, data_dir)?;
    unstage(host, &files, &dmp, driver_name, volume_handle).await
}

/// NodeUnstageVolume (when the driver has STAGE_UNSTAGE_VOLUME), then removal of the global
/// mount dir. The caller holds the volume's lock.
async fn unstage(
    host: &Host,
    files: &OpenFiles<'_>,
    dmp: &Path,
    driver_name: &str,
    volume_handle: &str,
) -> Result<()> {
    let (driver, volume) = (driver_name, volume_handle);
    tracing::debug!(
        driver,
        volume,
        "{}",
        csi_log!("attacher.UnmountDevice({})", dmp.display())
    );
    let op = Operation::start(
        host,
        driver_name,
        &csi_log!("attacher.UnmountDevice failed to create newCsiDriverClient"),
    )?;
    let caps = op.capabilities().await.map_err(|e| {
        e.context(csi_log!(
            "attacher.UnmountDevice failed to check whether STAGE_UNSTAGE_VOLUME set"
        ))
        .with_class(ErrorClass::Final)
    })?;
    if caps.stage_unstage {
        files
            .beneath()
            .check_no_symlink(dmp, &csi_log!("attacher.UnmountDevice"))?;
        let path = dmp.display().to_string();
        op.client()
            .node_unstage(volume_handle, &path, op.deadline)
            .await
            .map_err(|e| e.context(csi_log!("attacher.UnmountDevice failed")))?;
        tracing::debug!(
            driver,
            volume,
            "{}",
            csi_log!("attacher.UnmountDevice successfully requested NodeUnStageVolume [{path}]")
        );
    } else {
        tracing::info!("{}", csi_log!("attacher.UnmountDevice STAGE_UNSTAGE_VOLUME capability not set. Skipping UnmountDevice..."));
    }
    remove_global_mount(files, dmp)
}

fn remove_global_mount(files: &OpenFiles, dmp: &Path) -> Result<()> {
    files.remove_mount_dir(dmp).map_err(|e| {
        e.context(csi_log!(
            "failed to clean up global mount {}",
            dmp.display()
        ))
    })
}

/// UnmountDevice of the volume `volume_handle` of `driver` when its `vol_data.json` may be
/// gone (beyond upstream, kubernetes/kubernetes#85476): the device mount path is derived from
/// the two, and NodeUnstageVolume is called even without the file. A file that is there must
/// name the same driver and handle. Without a global mount dir for the pair, a staged block
/// volume whose `vol_data.json` records them is torn down instead (`TearDownDevice`); one
/// whose file is gone cannot be found by its handle.
pub async fn unmount_device_by_handle(
    host: &Host,
    driver: &str,
    volume_handle: &str,
) -> Result<()> {
    let dmp = host.layout().device_mount_path(driver, volume_handle)?;
    let data_dir = dmp.parent().unwrap_or(&dmp);
    if host.files().open()?.beneath().entry(data_dir)? == Entry::Missing {
        let block = inventory::walk(host.files())?.staged.into_iter().find(|s| {
            s.kind == Kind::Block
                && s.driver.as_deref() == Some(driver)
                && s.volume_handle.as_deref() == Some(volume_handle)
        });
        if let Some(spec_name) = block.and_then(|s| s.spec_name) {
            let unmapper = BlockUnmapper::new(host, &spec_name, "")?;
            return unmapper.tear_down_device(host, Path::new(""), "").await;
        }
    }
    let _volume = host.volume_locks().lock(data_dir).await;
    let files = host.files().open()?;
    match files.load(data_dir) {
        Ok(data) => {
            let recorded = (data.get(keys::DRIVER_NAME), data.get(keys::VOLUME_HANDLE));
            if recorded != (Some(&driver.to_string()), Some(&volume_handle.to_string())) {
                return Err(Error::new(
                    ErrorKind::FailedPrecondition,
                    csi_log!(
                        "attacher.UnmountDevice: {} records driver {:?} and volume handle {:?}, not {driver:?} and {volume_handle:?}",
                        data_dir.join(volume_data::FILE_NAME).display(),
                        recorded.0.map_or("", String::as_str),
                        recorded.1.map_or("", String::as_str)
                    ),
                ));
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            tracing::info!("{}", csi_log!("attacher.UnmountDevice: no volume data file in {}, unstaging volume {volume_handle:?} of driver {driver} as asked", data_dir.display()));
        }
        Err(e) => return Err(e.context(csi_log!("attacher.UnmountDevice"))),
    }
    unstage(host, &files, &dmp, driver, volume_handle).await
}
