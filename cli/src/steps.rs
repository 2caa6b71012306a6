//! The kubelet's steps, each one kcsi call on the host, run through the session so their RPCs
//! are shown and recorded. Shared by `lifecycle` and the single-step commands.

use std::path::{Path, PathBuf};

use kcsi::attacher;
use kcsi::reconstruct;
use kcsi::unique_volume_name;
use kcsi::volume_stats;
use kcsi::Host;
use kcsi::{registration, NodeAgent};
use kcsi::{Error, ErrorKind};

use crate::driver;
use crate::kubelet;
use crate::node::{self, Volume};
use crate::probe;
use crate::session::{value, Done, Session, Stop};

/// The versions node-driver-registrar reports for every driver.
const VERSIONS: &[&str] = &["1.0.0"];

/// GetPluginInfo, as node-driver-registrar does first: the driver's name.
pub async fn identify(s: &mut Session, want: Option<&str>) -> Result<String, Stop> {
    let ch = s.channel.clone();
    let timeout = s.timeout;
    let want = want.map(str::to_string);
    let name = s
        .step("identify", async move {
            let (name, version) = driver::plugin_info(&ch, timeout)
                .await
                .map_err(|e| e.context("the endpoint does not answer as a CSI driver"))?;
            if let Some(w) = want.filter(|w| *w != name) {
                return Err(Error::invalid(format!(
                    "--driver {w:?}, but the driver says it is {name:?}"
                )));
            }
            let note = format!("driver {name} {version}");
            Ok(Done::Value(name, Some(note)))
        })
        .await?;
    name.ok_or(Stop)
}

/// RegisterPlugin: NodeGetInfo, node info recorded.
pub async fn register(
    s: &mut Session,
    node: &NodeAgent,
    driver: &str,
    name: &str,
) -> Result<(), Stop> {
    let endpoint = s.endpoint_str();
    s.step(name, async {
        let versions: Vec<String> = VERSIONS.iter().map(|v| v.to_string()).collect();
        let info = registration::register(node, driver, &endpoint, &versions, None).await?;
        Ok(Done::Value(
            (),
            Some(format!(
                "registered {driver}: node id {:?}, max volumes {}, topology {:?}",
                info.node_id, info.max_volumes_per_node, info.topology
            )),
        ))
    })
    .await
    .map(drop)
}

pub async fn deregister(s: &mut Session, node: &NodeAgent, driver: &str) -> Result<(), Stop> {
    s.step("deregister", async {
        registration::deregister(node, driver).await.map(value)
    })
    .await
    .map(drop)
}

/// WaitForAttach, when the CSIDriver requires attach (the publish context stands in for the
/// VolumeAttachment).
pub async fn attach_wait(s: &mut Session, host: &Host, v: &Volume) -> Result<(), Stop> {
    let required = node::attach_required(host, &v.driver);
    let timeout = s.timeout;
    s.step("attach wait", async {
        if !required {
            return Ok(Done::Skipped(
                "the CSIDriver says attachRequired: false (give --publish-context to attach)"
                    .into(),
            ));
        }
        let name = attacher::wait_for_attach(host, &v.spec, timeout).await?;
        Ok(Done::Value(
            (),
            Some(format!("attached: VolumeAttachment {name}")),
        ))
    })
    .await
    .map(drop)
}

/// The staging path: MountDevice's global mount, or the block staging path.
pub fn staging_path(host: &Host, v: &Volume) -> Result<PathBuf, Error> {
    if v.block {
        Ok(host.layout().block_paths(&v.spec_name, "")?.staging_path)
    } else {
        attacher::device_mount_path(host, &v.spec)
    }
}

/// The path the pod uses: its mount path, or the block publish path.
pub fn target_path(
    host: &Host,
    block: bool,
    spec_name: &str,
    pod_uid: &str,
) -> Result<PathBuf, Error> {
    if block {
        host.layout()
            .block_paths(spec_name, pod_uid)?
            .publish_path
            .ok_or_else(|| Error::invalid("a block publish path needs a pod UID"))
    } else {
        host.layout().pod_mount_path(pod_uid, spec_name)
    }
}

pub async fn stage(s: &mut Session, host: &Host, v: &Volume) -> Result<(), Stop> {
    s.step("stage", async {
        Ok(match kubelet::stage(host, v).await? {
            Some(p) => Done::Value((), Some(format!("staged at {}", p.display()))),
            None => Done::Skipped("the driver has no STAGE_UNSTAGE_VOLUME".into()),
        })
    })
    .await
    .map(drop)
}

pub async fn publish(s: &mut Session, host: &Host, v: &Volume) -> Result<PathBuf, Stop> {
    let path = s
        .step("publish", async {
            let p = kubelet::publish(host, v).await?;
            let note = format!("published at {}", p.display());
            Ok(Done::Value(p, Some(note)))
        })
        .await?;
    path.ok_or(Stop)
}

pub async fn probe(s: &mut Session, v: &Volume, path: &Path) -> Result<(), Stop> {
    let (block, read_only) = (v.block, v.read_only);
    s.step("probe", async move {
        let note = if block {
            probe::block(path, read_only)?
        } else {
            probe::filesystem(path, read_only)?
        };
        Ok(Done::Value((), Some(note)))
    })
    .await
    .map(drop)
}

/// NodeGetVolumeStats on the pod's path; a driver without GET_VOLUME_STATS is skipped, as the
/// kubelet skips its metrics.
pub async fn stats(
    s: &mut Session,
    host: &Host,
    driver: &str,
    handle: &str,
    path: &Path,
) -> Result<(), Stop> {
    s.step("stats", async {
        match volume_stats(host, driver, handle, path).await {
            Ok(m) => Ok(Done::Value(
                (),
                Some(format!(
                    "capacity {} B, available {} B, used {} B, inodes {} ({} free)",
                    m.capacity_bytes, m.available_bytes, m.used_bytes, m.inodes, m.inodes_free
                )),
            )),
            Err(e) if e.kind() == ErrorKind::NotSupported => Ok(Done::Skipped(e.message().into())),
            Err(e) => Err(e),
        }
    })
    .await
    .map(drop)
}

/// ConstructVolumeSpec (block: ConstructBlockVolumeSpec) from what is on disk, checked
/// against the volume it must describe.
pub async fn reconstruct(s: &mut Session, host: &Host, v: &Volume) -> Result<(), Stop> {
    s.step("reconstruct", async {
        let rebuilt = if v.block {
            let map = host.layout().block_global_map_path(&v.spec_name)?;
            reconstruct_block(host, &v.pod_uid, &v.spec_name, &map)?
        } else {
            let dir = host.layout().pod_volume_dir(&v.pod_uid, &v.spec_name)?;
            let name = unique_volume_name(&v.driver, &v.handle);
            serde_json::json!(reconstruct::construct_volume_spec(host, &name, &dir)?.spec)
        };
        let pv = &rebuilt["persistentVolume"];
        let got = (
            pv.pointer("/metadata/name").and_then(|n| n.as_str()),
            pv.pointer("/spec/csi/driver").and_then(|n| n.as_str()),
            pv.pointer("/spec/csi/volumeHandle")
                .and_then(|n| n.as_str()),
        );
        let want = (
            Some(v.spec_name.as_str()),
            Some(v.driver.as_str()),
            Some(v.handle.as_str()),
        );
        if got != want {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("the reconstructed spec {rebuilt} does not name {want:?}"),
            ));
        }
        Ok(Done::Value(
            (),
            Some(format!("rebuilt from vol_data.json: {rebuilt}")),
        ))
    })
    .await
    .map(drop)
}

fn reconstruct_block(
    host: &Host,
    pod_uid: &str,
    spec_name: &str,
    map: &Path,
) -> Result<serde_json::Value, Error> {
    kcsi::reconstruct::construct_block_volume_spec(host, pod_uid, spec_name, map)
        .map(|spec| serde_json::json!(spec))
}

/// Whether the volume named `spec_name` under the host's root is a block volume.
pub fn is_block(host: &Host, spec_name: &str) -> bool {
    host.layout().block_data_dir(spec_name).is_ok_and(|d| {
        host.files()
            .open()
            .is_ok_and(|files| files.load(&d).is_ok())
    })
}

pub async fn unpublish(
    s: &mut Session,
    host: &Host,
    block: bool,
    spec_name: &str,
    pod_uid: &str,
) -> Result<(), Stop> {
    s.step("unpublish", async {
        kubelet::unpublish(host, block, spec_name, pod_uid)
            .await
            .map(value)
    })
    .await
    .map(drop)
}

pub async fn unstage(
    s: &mut Session,
    host: &Host,
    block: bool,
    driver: &str,
    handle: &str,
    spec_name: &str,
) -> Result<(), Stop> {
    s.step("unstage", async {
        kubelet::unstage(host, block, driver, handle, spec_name)
            .await
            .map(value)
    })
    .await
    .map(drop)
}

pub const LEFTOVERS: &str = "unmount leftovers";

/// The last resort after clean-up: whatever is still mounted under the root (the driver died
/// or refused) is unmounted by kcsi itself, so no mount is left behind.
pub async fn unmount_leftovers(s: &mut Session, root: &Path) -> Result<(), Stop> {
    let left = kcsi::mounts_below(root).unwrap_or_default();
    if left.is_empty() {
        return Ok(());
    }
    s.step(LEFTOVERS, async {
        let mut failed: Vec<String> = Vec::new();
        for p in &left {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default();
            // SAFETY: umount2 on a NUL-terminated path we own.
            if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
                failed.push(format!(
                    "{}: {}",
                    p.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
        let list: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
        if failed.is_empty() {
            Err::<Done<()>, _>(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "the driver left {} mount(s) that kcsi unmounted itself: {}",
                    left.len(),
                    list.join(", ")
                ),
            ))
        } else {
            Err(Error::new(
                ErrorKind::Io,
                format!(
                    "mounts left under the root could not be unmounted: {}",
                    failed.join("; ")
                ),
            ))
        }
    })
    .await
    .map(drop)
}
