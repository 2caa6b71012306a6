//! Block volumes, upstream's `csiBlockMapper` (and its unmapper): NodeStage to
//! `volumeDevices/staging/<spec>`, NodePublish to `volumeDevices/publish/<spec>/<podUID>` (a
//! file the driver creates), and the matching teardown. The host does the rest of the kubelet's
//! block work (symlinks, bind mount into the global map path, loop device lock).
//!
//! ```text
//! <root>/plugins/kubernetes.io/csi/volumeDevices/<escaped spec>/dev/        global map path
//! <root>/plugins/kubernetes.io/csi/volumeDevices/<escaped spec>/data/vol_data.json
//! <root>/plugins/kubernetes.io/csi/volumeDevices/staging/<spec>              staging path
//! <root>/plugins/kubernetes.io/csi/volumeDevices/publish/<spec>/<podUID>     publish path
//! <root>/pods/<podUID>/volumeDevices/kubernetes.io~csi/<spec>               pod device map path
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::csi::csi_client::NodeCapabilities;
use crate::csi::proto::csi;
use crate::disk::beneath::Entry;
use crate::disk::files::OpenFiles;
use crate::disk::paths::{attachment_name, BlockPaths};
use crate::disk::volume_data::{self, keys, VolumeData};
use crate::error::{Error, ErrorClass, ErrorKind, Result};
use crate::host::Host;
use crate::spec::{LifecycleMode, VolumeSpec};
use crate::volume::capability::{volume_capability, FS_TYPE_BLOCK};
use crate::volume::metrics::{self, VolumeMetrics};
use crate::volume::operation::{pod_info_attributes, Operation};
use crate::volume::reconstruct::RebuiltSpec;

impl BlockPaths {
    fn publish_path(&self) -> Result<&Path> {
        self.publish_path
            .as_deref()
            .ok_or_else(|| Error::invalid("this block volume handle was made without a pod UID"))
    }
}

/// A block mapper's paths, as `kcsi_block_mapper_paths` reports them.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MapperPaths {
    pub global_map_path: PathBuf,
    pub staging_path: PathBuf,
    pub publish_dir: PathBuf,
    pub publish_path: Option<PathBuf>,
    pub pod_device_map_path: Option<PathBuf>,
    pub pod_device_map_name: String,
    pub volume_data_dir: PathBuf,
    pub metrics_path: Option<PathBuf>,
}

/// Upstream `NewBlockVolumeMapper` and the mapper's operations.
#[derive(Clone, Debug)]
pub struct BlockMapper {
    pub spec: VolumeSpec,
    pub pod: Pod,
    pub spec_name: String,
    pub pod_uid: String,
    pub driver_name: String,
    pub volume_handle: String,
    pub read_only: bool,
    pub paths: BlockPaths,
}

impl BlockMapper {
    /// Checks the spec and pod and writes `data/vol_data.json` (what the unmapper and
    /// reconstruction read later).
    pub async fn new(host: &Host, spec: VolumeSpec, pod: Pod) -> Result<BlockMapper> {
        let src = spec
            .persistent_source()
            .map_err(|e| e.context(csi_log!("CSIPersistentVolumeSource not defined in spec")))?;
        let (driver_name, volume_handle) = (src.driver.clone(), src.volume_handle.clone());
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        if pod_uid.is_empty() {
            return Err(Error::invalid(csi_log!(
                "blockMapper needs a pod with metadata.uid"
            )));
        }
        let spec_name = spec.name().to_string();
        let paths = host.layout().block_paths(&spec_name, &pod_uid)?;

        let _volume = host.volume_locks().lock(&paths.volume_dir).await;
        let files = host.files().open()?;
        let fs = files.beneath();
        files.make_dirs(&paths.data_dir)?;
        let node = &host.config().node_name;
        let data: VolumeData = [
            (keys::SPEC_VOL_ID, spec_name.as_str()),
            (keys::VOLUME_HANDLE, volume_handle.as_str()),
            (keys::DRIVER_NAME, driver_name.as_str()),
            (keys::NODE_NAME, node.as_str()),
            (
                keys::ATTACHMENT_ID,
                &attachment_name(&volume_handle, &driver_name, node),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        if let Err(e) = files.save(&paths.data_dir, &data) {
            let clean = files
                .remove_volume_data_dir(&paths.data_dir)
                .and_then(|()| fs.remove_dir(&paths.volume_dir, "failed to delete volume dir"));
            if let Err(clean) = clean {
                tracing::error!(
                    "{}",
                    csi_log!(
                        "failed to remove {} after a failed save: {clean}",
                        paths.data_dir.display()
                    )
                );
            }
            return Err(e.context(csi_log!(
                "csi.NewBlockVolumeMapper failed to save volume info data"
            )));
        }
        let read_only = spec.read_only;
        Ok(BlockMapper {
            spec,
            pod,
            spec_name,
            pod_uid,
            driver_name,
            volume_handle,
            read_only,
            paths,
        })
    }

    /// The mapper's paths, as `kcsi_block_mapper_paths` reports them.
    pub fn paths(&self) -> MapperPaths {
        let p = &self.paths;
        MapperPaths {
            global_map_path: p.global_map_path.clone(),
            staging_path: p.staging_path.clone(),
            publish_dir: p.publish_dir.clone(),
            publish_path: p.publish_path.clone(),
            pod_device_map_path: p.pod_device_map_path.clone(),
            pod_device_map_name: self.spec_name.clone(),
            volume_data_dir: p.data_dir.clone(),
            metrics_path: p.metrics_path.clone(),
        }
    }

    /// The mapper's `MetricsProvider` (upstream `NewMetricsCsi` on `<globalMapPath>/<podUID>`).
    pub async fn metrics(&self, host: &Host) -> Result<VolumeMetrics> {
        let path = self.paths.metrics_path.as_ref().ok_or_else(|| {
            Error::invalid("this block mapper was made without a pod UID: it has no metrics path")
        })?;
        metrics::volume_stats(host, &self.driver_name, &self.volume_handle, path).await
    }

    fn source(&self) -> Result<&CSIPersistentVolumeSource> {
        self.spec.persistent_source()
    }

    fn access_mode(&self) -> &str {
        self.spec
            .access_modes()
            .first()
            .map_or("ReadWriteOnce", String::as_str)
    }

    /// What SetUpDevice and MapPodDevice start with, in upstream's order: the driver (transient
    /// when not registered), the attachment's publish context, the driver's capabilities.
    async fn begin<'h>(
        &self,
        host: &'h Host,
        what: &str,
    ) -> Result<(Operation<'h>, HashMap<String, String>, NodeCapabilities)> {
        let (driver, volume, pod) = (&self.driver_name, &self.volume_handle, &self.pod_uid);
        tracing::debug!(
            driver,
            volume,
            pod,
            "{}",
            csi_log!("blockMapper.{what} called")
        );
        let op = Operation::start(
            host,
            &self.driver_name,
            &csi_log!("blockMapper.{what} failed to get CSI client"),
        )?
        .migrated(self.spec.migrated);
        let publish_context = op
            .publish_context(&self.spec, &self.volume_handle)
            .await?
            .unwrap_or_default();
        // MapPodDevice's probe is inside NodePublishVolume upstream (uncertain when the driver
        // may still answer); SetUpDevice's is wrapped in a plain, final error.
        let caps = op.capabilities().await.map_err(|e| {
            if what == "SetUpDevice" {
                e.context(csi_log!(
                    "blockMapper.stageVolumeForBlock failed to check STAGE_UNSTAGE_VOLUME capability"
                ))
                .with_class(ErrorClass::Final)
            } else {
                e
            }
        })?;
        Ok((op, publish_context, caps))
    }

    /// `SetUpDevice`: NodeStageVolume with block access at the staging path (when the driver
    /// has STAGE_UNSTAGE_VOLUME; else `None`). A final stage error removes the volume's files
    /// (data, dev and staging dirs), as upstream.
    pub async fn set_up_device(&self, host: &Host) -> Result<Option<PathBuf>> {
        let src = self.source()?;
        let _volume = host.volume_locks().lock(&self.paths.volume_dir).await;
        let (op, publish_context, caps) = self.begin(host, "SetUpDevice").await?;
        if !caps.stage_unstage {
            tracing::info!("{}", csi_log!("blockMapper.stageVolumeForBlock STAGE_UNSTAGE_VOLUME capability not set. Skipping MountDevice..."));
            return Ok(None);
        }
        let secrets = op
            .secrets(
                &self.spec,
                "NodeStageSecretRef",
                src.node_stage_secret_ref.as_ref(),
            )
            .await?;
        let staging = &self.paths.staging_path;
        let files = host.files().open()?;
        let fs = files.beneath();
        files
            .make_dirs(staging)
            .map_err(|e| e.context(csi_log!("blockMapper.stageVolumeForBlock")))?;
        let capability =
            volume_capability(self.access_mode(), &caps, FS_TYPE_BLOCK, Vec::new(), None);
        // The driver resolves the path itself: a symlink swapped in since must not lead it out.
        fs.check_no_symlink(staging, &csi_log!("blockMapper.stageVolumeForBlock"))?;
        let stage = op.node_stage(src, staging, publish_context, capability, secrets);
        if let Err(e) = stage.await {
            if !e.is_uncertain() {
                if let Err(clean) = cleanup_orphan_device_files(&files, &self.paths) {
                    tracing::error!("{}", csi_log!("blockMapper.SetUpDevice failed to clean up after a final error: {clean}"));
                }
            }
            return Err(e);
        }
        Ok(Some(staging.clone()))
    }

    /// `MapPodDevice`: NodePublishVolume with block access at the publish path. The kubelet
    /// creates the parent directory; the driver creates the file.
    pub async fn map_pod_device(&self, host: &Host) -> Result<PathBuf> {
        let src = self.source()?;
        let _volume = host.volume_locks().lock(&self.paths.volume_dir).await;
        let (op, publish_context, caps) = self.begin(host, "MapPodDevice").await?;
        let publish_path = self.paths.publish_path()?;
        let files = host.files().open()?;
        let fs = files.beneath();
        files
            .make_dirs(&self.paths.publish_dir)
            .map_err(|e| e.context(csi_log!("blockMapper.publishVolumeForBlock")))?;

        let mut volume_context: HashMap<String, String> = src
            .volume_attributes
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let facts = host.driver_facts(&self.driver_name).map_err(|e| {
            e.context(csi_log!(
                "blockMapper.publishVolumeForBlock failed to assemble volume attributes"
            ))
            .transient()
        })?;
        if facts.pod_info_on_mount {
            volume_context.extend(pod_info_attributes(
                &self.pod,
                self.pod.metadata.uid.as_deref().unwrap_or_default(),
                LifecycleMode::Persistent,
            ));
        }
        let secrets = op
            .secrets(
                &self.spec,
                "NodePublishSecretRef",
                src.node_publish_secret_ref.as_ref(),
            )
            .await?;
        let req = csi::NodePublishVolumeRequest {
            volume_id: self.volume_handle.clone(),
            publish_context,
            // Always sent for block, even without STAGE_UNSTAGE_VOLUME, as upstream does.
            staging_target_path: self.paths.staging_path.display().to_string(),
            target_path: publish_path.display().to_string(),
            volume_capability: Some(volume_capability(
                self.access_mode(),
                &caps,
                FS_TYPE_BLOCK,
                Vec::new(),
                None,
            )),
            readonly: self.read_only,
            secrets,
            volume_context,
        };
        fs.check_no_symlink(publish_path, &csi_log!("blockMapper.publishVolumeForBlock"))?;
        op.client().node_publish(req, op.deadline).await?;
        Ok(publish_path.to_path_buf())
    }
}

/// Upstream `NewBlockVolumeUnmapper`: what `data/vol_data.json` recorded.
#[derive(Clone, Debug)]
pub struct BlockUnmapper {
    pub spec_name: String,
    pub pod_uid: String,
    /// Driver and handle; `None` when an interrupted set-up or teardown left only kcsi's
    /// leftovers (no `vol_data.json`, no staging path, nothing mounted), which teardown removes.
    pub volume: Option<(String, String)>,
    pub paths: BlockPaths,
}

impl BlockUnmapper {
    /// `pod_uid` may be empty: the kubelet tears a device down without a pod.
    pub fn new(host: &Host, spec_name: &str, pod_uid: &str) -> Result<BlockUnmapper> {
        let paths = host.layout().block_paths(spec_name, pod_uid)?;
        let load = || -> Result<Option<(String, String)>> {
            let files = host.files().open()?;
            let fs = files.beneath();
            let data = match files.load(&paths.data_dir) {
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    let data_name = paths.data_dir.file_name().and_then(|n| n.to_str());
                    let leftovers = fs.entry(&paths.staging_path)? == Entry::Missing
                        && files.only_leftovers(&paths.volume_dir, data_name)?;
                    return if leftovers { Ok(None) } else { Err(e) };
                }
                other => other?,
            };
            let dir = &paths.data_dir;
            Ok(Some((
                volume_data::get(&data, keys::DRIVER_NAME, dir)?.to_string(),
                volume_data::get(&data, keys::VOLUME_HANDLE, dir)?.to_string(),
            )))
        };
        let volume = load().map_err(|e| {
            e.context(csi_log!(
                "unmapper failed to load volume data file [{}]",
                paths.data_dir.display()
            ))
        })?;
        Ok(BlockUnmapper {
            spec_name: spec_name.to_string(),
            pod_uid: pod_uid.to_string(),
            volume,
            paths,
        })
    }

    fn operation<'h>(&self, host: &'h Host, driver: &str, what: &str) -> Result<Operation<'h>> {
        let volume = self.volume.as_ref().map_or("", |(_, v)| v.as_str());
        let pod = &self.pod_uid;
        tracing::debug!(
            driver,
            volume,
            pod,
            "{}",
            csi_log!("blockMapper.{what} called")
        );
        Operation::start(
            host,
            driver,
            &csi_log!("blockMapper.{what} failed to get CSI client"),
        )
    }

    /// `UnmapPodDevice`: NodeUnpublishVolume of the publish path (even when it is gone: the
    /// driver decides what is left to do).
    pub async fn unmap_pod_device(&self, host: &Host) -> Result<()> {
        let publish_path = self.paths.publish_path()?;
        let _volume = host.volume_locks().lock(&self.paths.volume_dir).await;
        let Some((driver, volume_handle)) = &self.volume else {
            return Ok(());
        };
        let op = self.operation(host, driver, "UnmapPodDevice")?;
        host.files().open()?.beneath().check_no_symlink(
            publish_path,
            &csi_log!("blockMapper.unpublishVolumeForBlock"),
        )?;
        op.client()
            .node_unpublish(
                volume_handle,
                &publish_path.display().to_string(),
                op.deadline,
            )
            .await
            .map_err(|e| e.context(csi_log!("blockMapper.unpublishVolumeForBlock failed")))
    }

    /// `TearDownDevice`: NodeUnstageVolume when the staging path exists, then removal of the
    /// volume's leftover files (errors there are only logged, as upstream).
    /// `map_path` and `device` are only logged, as upstream only logs them.
    pub async fn tear_down_device(&self, host: &Host, map_path: &Path, device: &str) -> Result<()> {
        tracing::debug!(
            "{}",
            csi_log!(
                "blockMapper.TearDownDevice [mapPath={}, devicePath={device}]",
                map_path.display()
            )
        );
        let _volume = host.volume_locks().lock(&self.paths.volume_dir).await;
        let files = host.files().open()?;
        let fs = files.beneath();
        if let Some((driver, volume_handle)) = &self.volume {
            let op = self.operation(host, driver, "TearDownDevice")?;
            let staging = &self.paths.staging_path;
            if fs.entry(staging)? == Entry::Missing {
                tracing::debug!("{}", csi_log!("blockMapper.TearDownDevice stagingPath({}) has already been deleted, skip calling NodeUnstageVolume", staging.display()));
            } else {
                let caps = op.capabilities().await.map_err(|e| {
                    e.context(csi_log!("blockMapper.unstageVolumeForBlock failed to check STAGE_UNSTAGE_VOLUME capability"))
                        .with_class(ErrorClass::Final)
                })?;
                if caps.stage_unstage {
                    fs.check_no_symlink(staging, &csi_log!("blockMapper.unstageVolumeForBlock"))?;
                    let path = staging.display().to_string();
                    op.client()
                        .node_unstage(volume_handle, &path, op.deadline)
                        .await
                        .map_err(|e| {
                            e.context(csi_log!("blockMapper.unstageVolumeForBlock failed"))
                        })?;
                } else {
                    tracing::info!("{}", csi_log!("blockMapper.unstageVolumeForBlock STAGE_UNSTAGE_VOLUME capability not set. Skipping UnmountDevice..."));
                }
                fs.remove_all_one_filesystem(staging)?;
            }
        }
        if let Err(e) = cleanup_orphan_device_files(&files, &self.paths) {
            tracing::debug!(
                "{}",
                csi_log!("Failed to clean up block volume directory {e}")
            );
        }
        Ok(())
    }
}

/// Upstream `cleanupOrphanDeviceFiles`: the (empty) publish dir, the staging path, and
/// everything under `volumeDevices/<spec>` — never crossing a mount point. `data/vol_data.json`
/// goes last, so an interrupted cleanup can be retried with a new unmapper.
fn cleanup_orphan_device_files(files: &OpenFiles, paths: &BlockPaths) -> Result<()> {
    let fs = files.beneath();
    fs.remove_dir(
        &paths.publish_dir,
        &csi_log!("failed to remove publish directory"),
    )?;
    fs.remove_dir(
        &paths.staging_path,
        &csi_log!("failed to delete volume staging path"),
    )?;
    for name in fs.list(&paths.volume_dir)? {
        let path = paths.volume_dir.join(name);
        if path != paths.data_dir {
            fs.remove_all_one_filesystem(&path)?;
        }
    }
    files.remove_volume_data_dir(&paths.data_dir)?;
    fs.remove_dir(&paths.volume_dir, &csi_log!("failed to delete volume dir"))
}

/// `ConstructBlockVolumeSpec`: a Block-mode PersistentVolume spec from `data/vol_data.json`
/// (only name, driver and handle are known on disk).
pub fn construct_block_volume_spec(
    host: &Host,
    pod_uid: &str,
    spec_name: &str,
    map_path: &Path,
) -> Result<RebuiltSpec> {
    tracing::debug!(
        "{}",
        csi_log!(
            "plugin.ConstructBlockVolumeSpec [podUID={pod_uid}, specVolName={spec_name}, path={}]",
            map_path.display()
        )
    );
    let data_dir = host.layout().block_data_dir(spec_name)?;
    let data = host.files().open()?.load(&data_dir).map_err(|e| {
        e.context(csi_log!(
            "plugin.ConstructBlockVolumeSpec failed loading volume data using [{}]",
            map_path.display()
        ))
    })?;
    let field = |k: &str| data.get(k).cloned().unwrap_or_default();
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(field(keys::SPEC_VOL_ID)),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: field(keys::DRIVER_NAME),
                volume_handle: field(keys::VOLUME_HANDLE),
                ..Default::default()
            }),
            volume_mode: Some("Block".to_string()),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(RebuiltSpec::Persistent {
        persistent_volume: Box::new(pv),
        read_only: false,
    })
}
