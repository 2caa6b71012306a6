//! What the kubelet asks of a published volume: its usage and condition, and its growth.

use std::path::{Path, PathBuf};

use kcsi::{node_expand, volume_stats, ExpandOptions, VolumeMetrics};

use super::case::{check, fail, End, Outcome};
use super::ctx::{Ctx, VolumeWish};
use super::upstream;
use crate::driver;
use crate::node::Volume;
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

const GROWN: i64 = 20 << 20;

pub async fn expand_online(c: &mut Ctx) -> Outcome {
    let f = &c.facts;
    if !(f.controller_expand && f.node.expand_volume) {
        return Err(End::Skip(
            "the driver has no Controller and Node EXPAND_VOLUME capabilities".into(),
        ));
    }
    let caps = f.node;
    let (v, path) = published(c, (true, "")).await?;
    let (bytes, node_needed) =
        driver::controller_expand(&c.channel, &v.handle, GROWN, Default::default(), c.timeout)
            .await
            .map_err(fail(upstream::EXPAND))?;
    if bytes < GROWN {
        return Err(check(
            format!("ControllerExpandVolume to {GROWN} B answered capacity {bytes} B"),
            upstream::EXPAND,
        ));
    }
    let staging = steps::staging_path(c.agent()?, &v).map_err(fail(upstream::EXPAND))?;
    let opts = ExpandOptions {
        spec: v.spec.clone(),
        device_path: String::new(),
        device_mount_path: path.display().to_string(),
        device_stage_path: if caps.stage_unstage {
            staging.display().to_string()
        } else {
            String::new()
        },
        new_size: GROWN.to_string(),
        old_size: None,
    };
    let expanded = node_expand(c.agent()?, &opts)
        .await
        .map_err(fail(upstream::EXPAND))?;
    if !expanded {
        return Err(check(
            "NodeExpandVolume was not called although the driver has EXPAND_VOLUME",
            upstream::EXPAND,
        ));
    }
    let note = if caps.get_volume_stats {
        let m = stats(c, &v, &path).await?;
        if m.capacity_bytes < GROWN {
            return Err(check(
                format!(
                    "after NodeExpandVolume to {GROWN} B, NodeGetVolumeStats answered capacity {} B",
                    m.capacity_bytes
                ),
                upstream::EXPAND,
            ));
        }
        format!(", stats capacity {} B", m.capacity_bytes)
    } else {
        String::new()
    };
    c.tear_down(&v).await?;
    Ok(format!(
        "controller capacity {bytes} B (node expansion required: {node_needed}){note}"
    ))
}
