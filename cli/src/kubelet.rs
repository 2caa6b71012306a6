//! The kubelet's four volume calls on a host, as plain functions: MountDevice / SetUpDevice,
//! SetUp / MapPodDevice, TearDown / UnmapPodDevice, UnmountDevice / TearDownDevice. The steps
//! (`lifecycle` and the single-step commands) and the volume plugin both run them.

use std::path::{Path, PathBuf};

use kcsi::attacher::{self, MountDeviceArgs};
use kcsi::Error;
use kcsi::Host;
use kcsi::{BlockMapper, BlockUnmapper};
use kcsi::{Mounter, MounterArgs, Unmounter};

use crate::node::{self, Volume};

/// NodeStageVolume: the staging path, or `None` for a block volume of a driver without
/// STAGE_UNSTAGE_VOLUME (nothing staged).
pub async fn stage(host: &Host, v: &Volume) -> Result<Option<PathBuf>, Error> {
    if v.block {
        let mapper = BlockMapper::new(host, v.spec.clone(), node::pod(&v.pod_uid)).await?;
        return mapper.set_up_device(host).await;
    }
    let dmp = attacher::device_mount_path(host, &v.spec)?;
    let args = MountDeviceArgs {
        fs_group: v.fs_group,
        se_linux_label: v.se_linux_label.clone(),
    };
    attacher::mount_device(host, &v.spec, &dmp, &args).await?;
    Ok(Some(dmp))
}

/// NodePublishVolume: the path the pod (the container) uses.
pub async fn publish(host: &Host, v: &Volume) -> Result<PathBuf, Error> {
    if v.block {
        let mapper = BlockMapper::new(host, v.spec.clone(), node::pod(&v.pod_uid)).await?;
        return mapper.map_pod_device(host).await;
    }
    let mounter = Mounter::new(host, v.spec.clone(), node::pod(&v.pod_uid))?;
    let args = MounterArgs {
        fs_group: v.fs_group,
        se_linux_label: v.se_linux_label.clone(),
        ..Default::default()
    };
    mounter.set_up(host, &args).await?;
    Ok(mounter.path().to_path_buf())
}

/// NodeUnpublishVolume of the volume `spec_name` published to pod `pod_uid`.
pub async fn unpublish(
    host: &Host,
    block: bool,
    spec_name: &str,
    pod_uid: &str,
) -> Result<(), Error> {
    if block {
        BlockUnmapper::new(host, spec_name, pod_uid)?
            .unmap_pod_device(host)
            .await
    } else {
        Unmounter::new(host, spec_name, pod_uid)?
            .tear_down(host)
            .await
    }
}

/// NodeUnstageVolume of a staged volume: a block one found from its `vol_data.json`, a
/// filesystem one by its driver and handle, also when its `vol_data.json` is lost (what
/// `kcsi list` tells a person to do then).
pub async fn unstage(
    host: &Host,
    block: bool,
    driver: &str,
    handle: &str,
    spec_name: &str,
) -> Result<(), Error> {
    if block {
        BlockUnmapper::new(host, spec_name, "")?
            .tear_down_device(host, Path::new(""), "")
            .await
    } else {
        attacher::unmount_device_by_handle(host, driver, handle).await
    }
}
