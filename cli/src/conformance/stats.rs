//! What the kubelet asks of a published volume: its usage and condition, and its growth.

use std::path::{Path, PathBuf};

use kcsi::{node_expand, volume_stats, ExpandOptions, VolumeMetrics};

use super::case::{check, fail, End, Outcome};
use super::ctx::{Ctx, VolumeWish};
use super::upstream;
use crate::driver;
use crate::node::Volume;
use crate::probe;
use crate::steps;

/// A published filesystem volume, or the skip of a driver without GET_VOLUME_STATS.
async fn published(c: &mut Ctx, need: (bool, &str)) -> Result<(Volume, PathBuf), End> {
    if !need.0 {
        return Err(End::Skip(format!("the driver has no {}", need.1)));
    }
    let v = c.volume(&VolumeWish::default()).await?;
    let path = c.set_up(&v).await?;
    Ok((v, path))
}

async fn stats(c: &Ctx, v: &Volume, path: &Path) -> Result<VolumeMetrics, End> {
    let m = volume_stats(c.agent()?, &v.driver, &v.handle, path)
        .await
        .map_err(fail(upstream::STATS))?;
    if m.capacity_bytes <= 0
        || m.used_bytes > m.capacity_bytes
        || m.available_bytes > m.capacity_bytes
    {
        return Err(check(
            format!(
                "NodeGetVolumeStats answered capacity {} B, used {} B, available {} B",
                m.capacity_bytes, m.used_bytes, m.available_bytes
            ),
            upstream::STATS,
        ));
    }
    Ok(m)
}

pub async fn usage(c: &mut Ctx) -> Outcome {
    let caps = c.facts.node;
    let (v, path) = published(
        c,
        (caps.get_volume_stats, "GET_VOLUME_STATS node capability"),
    )
    .await?;
    let m = stats(c, &v, &path).await?;
    c.tear_down(&v).await?;
    Ok(format!(
        "capacity {} B, used {} B, available {} B, inodes {} ({} free)",
        m.capacity_bytes, m.used_bytes, m.available_bytes, m.inodes, m.inodes_free
    ))
}

pub async fn condition(c: &mut Ctx) -> Outcome {
    let caps = c.facts.node;
    let need = caps.get_volume_stats && caps.volume_condition;
    let (v, path) = published(
        c,
        (
            need,
            "GET_VOLUME_STATS and VOLUME_CONDITION node capabilities",
        ),
    )
    .await?;
    let m = stats(c, &v, &path).await?;
    let Some(abnormal) = m.abnormal else {
        return Err(check(
            "the driver has VOLUME_CONDITION, but NodeGetVolumeStats answered no \
             volume_condition",
            upstream::CONDITION,
        ));
    };
    c.tear_down(&v).await?;
    Ok(format!(
        "condition reported: abnormal {abnormal}, message {:?}",
        m.message.unwrap_or_default()
    ))
}

pub const GROWN: i64 = 20 << 20;

/// ControllerExpandVolume of `v` to [`GROWN`], as the external-resizer does before the
/// kubelet's part: the capacity and whether the node must expand too.
pub async fn grow(c: &Ctx, v: &Volume, breaks: &'static str) -> Result<(i64, bool), End> {
    let (bytes, node_needed) =
        driver::controller_expand(&c.channel, &v.handle, GROWN, Default::default(), c.timeout)
            .await
            .map_err(fail(breaks))?;
    if bytes < GROWN {
        return Err(check(
            format!("ControllerExpandVolume to {GROWN} B answered capacity {bytes} B"),
            breaks,
        ));
    }
    Ok((bytes, node_needed))
}

/// The kubelet's NodeExpand of `v` to [`GROWN`] at `volume_path` (the pod's path once
/// published, the staging path before), with the staging path when the driver stages.
pub async fn node_expand_at(c: &Ctx, v: &Volume, volume_path: &Path) -> Result<bool, End> {
    let host = c.agent()?;
    let staging = steps::staging_path(host, v).map_err(fail(upstream::EXPAND))?;
    let opts = ExpandOptions {
        spec: v.spec.clone(),
        device_path: String::new(),
        device_mount_path: volume_path.display().to_string(),
        device_stage_path: if c.facts.node.stage_unstage {
            staging.display().to_string()
        } else {
            String::new()
        },
        new_size: GROWN.to_string(),
        old_size: None,
    };
    node_expand(host, &opts)
        .await
        .map_err(fail(upstream::EXPAND))
}

/// NodeGetVolumeStats of the expanded volume, when the driver has it: at least [`GROWN`].
pub async fn grown(c: &Ctx, v: &Volume, path: &Path, breaks: &'static str) -> Result<String, End> {
    if !c.facts.node.get_volume_stats {
        return Ok(String::new());
    }
    let m = stats(c, v, path).await?;
    if m.capacity_bytes < GROWN {
        return Err(check(
            format!(
                "after NodeExpandVolume to {GROWN} B, NodeGetVolumeStats answered capacity {} B",
                m.capacity_bytes
            ),
            breaks,
        ));
    }
    Ok(format!(", stats capacity {} B", m.capacity_bytes))
}

/// Why an expansion case does not apply, if it does not.
pub fn cannot_expand(c: &Ctx) -> Result<(), End> {
    let f = &c.facts;
    if f.controller_expand && f.node.expand_volume {
        Ok(())
    } else {
        Err(End::Skip(
            "the driver has no Controller and Node EXPAND_VOLUME capabilities".into(),
        ))
    }
}

pub async fn expand_online(c: &mut Ctx) -> Outcome {
    cannot_expand(c)?;
    let (v, path) = published(c, (true, "")).await?;
    let (bytes, node_needed) = grow(c, &v, upstream::EXPAND).await?;
    if !node_expand_at(c, &v, &path).await? {
        return Err(check(
            "NodeExpandVolume was not called although the driver has EXPAND_VOLUME",
            upstream::EXPAND,
        ));
    }
    let note = grown(c, &v, &path, upstream::EXPAND).await?;
    c.tear_down(&v).await?;
    Ok(format!(
        "controller capacity {bytes} B (node expansion required: {node_needed}){note}"
    ))
}

pub async fn expand_offline(c: &mut Ctx) -> Outcome {
    cannot_expand(c)?;
    if !c.facts.node.stage_unstage {
        return Err(End::Skip(
            "the driver has no STAGE_UNSTAGE_VOLUME (the kubelet expands a volume no pod uses \
             at its staging path)"
                .into(),
        ));
    }
    let breaks = upstream::EXPAND_OFFLINE;
    let v = c.volume(&VolumeWish::default()).await?;
    c.stage(&v).await?;
    let (bytes, _) = grow(c, &v, breaks).await?;
    let staging = steps::staging_path(c.agent()?, &v).map_err(fail(breaks))?;
    let expanded = node_expand_at(c, &v, &staging)
        .await
        .map_err(|e| e.blame(breaks, "at the staging path, before NodePublishVolume: "))?;
    if !expanded {
        return Err(check(
            "NodeExpandVolume was not called although the driver has EXPAND_VOLUME",
            breaks,
        ));
    }
    let path = c.publish(&v).await?;
    let io = probe::filesystem(&path, false).map_err(fail(breaks))?;
    let note = grown(c, &v, &path, breaks).await?;
    c.tear_down(&v).await?;
    Ok(format!(
        "controller capacity {bytes} B, expanded at the staging path before publish{note}; {io}"
    ))
}
