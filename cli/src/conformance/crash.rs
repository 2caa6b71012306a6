//! The kubelet's crash paths: a stage or publish whose answer is lost (the call times out after
//! the driver did the work) and its retry; the driver killed inside each call, restarted, and
//! the call retried as the uncertain operation it is; and a kubelet restart that rebuilds its
//! volumes from vol_data.json before tearing them down.

use std::time::Duration;

use kcsi::reconstruct::construct_volume_spec;
use kcsi::unique_volume_name;

use super::case::{check, fail, End, Outcome};
use super::ctx::{Ctx, VolumeWish};
use super::rpc;
use super::stats::{cannot_expand, grow, grown, node_expand_at};
use super::upstream;
use crate::node::Volume;
use crate::probe;
use crate::steps;

/// The first attempt must fail (the fault withheld its answer); anything else means the
/// fault never reached the call.
fn lost(first: Result<impl Sized, End>, rpc: &str) -> Result<(), End> {
    match first {
        Err(End::Fail(_)) => Ok(()),
        Err(skip) => Err(skip),
        Ok(_) => Err(check(
            format!("{rpc} answered within the deadline although the suite withheld its answer"),
            upstream::UNCERTAIN,
        )),
    }
}

fn retried(e: End) -> End {
    e.blame(upstream::UNCERTAIN, "the retry after a lost answer: ")
}

pub async fn uncertain_stage(c: &mut Ctx) -> Outcome {
    if !c.facts.node.stage_unstage {
        return Err(End::Skip(
            "the driver has no STAGE_UNSTAGE_VOLUME (the kubelet never calls NodeStageVolume)"
                .into(),
        ));
    }
    let v = c.volume(&VolumeWish::default()).await?;
    lost(c.stage(&v).await, "NodeStageVolume")?;
    c.stage(&v).await.map_err(retried)?;
    let path = c.publish(&v).await?;
    let io = probe::filesystem(&path, false).map_err(fail(upstream::UNCERTAIN))?;
    c.tear_down(&v).await.map_err(retried)?;
    Ok(format!(
        "first NodeStageVolume timed out, the retry staged; {io}"
    ))
}

pub async fn uncertain_publish(c: &mut Ctx) -> Outcome {
    let v = c.volume(&VolumeWish::default()).await?;
    c.stage(&v).await?;
    lost(c.publish(&v).await, "NodePublishVolume")?;
    let path = c.publish(&v).await.map_err(retried)?;
    let io = probe::filesystem(&path, false).map_err(fail(upstream::UNCERTAIN))?;
    c.tear_down(&v).await.map_err(retried)?;
    Ok(format!(
        "first NodePublishVolume timed out, the retry published; {io}"
    ))
}

pub async fn reconstruct(c: &mut Ctx) -> Outcome {
    let v = c.volume(&VolumeWish::default()).await?;
    let path = c.set_up(&v).await?;
    let info = c.restart().await?;
    if info.node_id != c.facts.node_id {
        return Err(check(
            format!(
                "NodeGetInfo answered node ID {:?} before the restart and {:?} after",
                c.facts.node_id, info.node_id
            ),
            upstream::REGISTER,
        ));
    }
    let host = c.agent()?;
    let dir = host
        .layout()
        .pod_volume_dir(&v.pod_uid, &v.spec_name)
        .map_err(fail(upstream::RECONSTRUCT))?;
    let rebuilt = construct_volume_spec(host, &unique_volume_name(&v.driver, &v.handle), &dir)
        .map_err(fail(upstream::RECONSTRUCT))?;
    let handle = serde_json::json!(rebuilt.spec)
        .pointer("/persistentVolume/spec/csi/volumeHandle")
        .and_then(|h| h.as_str().map(str::to_string));
    if handle.as_deref() != Some(v.handle.as_str()) {
        return Err(check(
            format!(
                "the spec rebuilt from {} names handle {handle:?}",
                dir.display()
            ),
            upstream::RECONSTRUCT,
        ));
    }
    if !kcsi::is_mount_point(&path).unwrap_or(false) {
        return Err(check(
            format!(
                "{} is no longer mounted after the kubelet restart",
                path.display()
            ),
            upstream::RECONSTRUCT,
        ));
    }
    c.tear_down(&v)
        .await
        .map_err(|e| e.blame(upstream::RECONSTRUCT, "after the restart: "))?;
    Ok(format!(
        "rebuilt {} from vol_data.json, torn down by the restarted kubelet",
        v.spec_name
    ))
}

/// How long a driver killed inside a call gets to be gone.
const DIES_WITHIN: Duration = Duration::from_secs(2);

/// The first attempt of `rpc` must have lost its answer to the kill (no status: the connection
/// broke) and the driver the suite started must be gone; then it is started again.
async fn killed_inside<T>(
    c: &mut Ctx,
    first: Result<T, End>,
    rpc: &str,
    breaks: &'static str,
) -> Result<(), End> {
    let driver = c.owned_driver()?;
    let f = match first {
        Ok(_) => {
            return Err(check(
                format!("{rpc} answered OK: the kill the suite set up did not land inside it"),
                breaks,
            ))
        }
        Err(End::Skip(why)) => return Err(End::Skip(why)),
        Err(End::Fail(f)) => f,
    };
    if !f.unanswered {
        return Err(check(
            format!(
                "{rpc} failed, but with an answer, not the lost connection of a driver \
                 killed inside it: {}",
                f.what
            ),
            breaks,
        ));
    }
    if !driver.exits_within(DIES_WITHIN).await {
        return Err(check(
            format!(
                "{rpc} lost its answer ({}), but the driver the suite started still runs \
                 {DIES_WITHIN:?} later: the kill did not land inside the call",
                f.what
            ),
            breaks,
        ));
    }
    c.restart_driver(breaks).await
}

fn after_restart(breaks: &'static str) -> impl Fn(End) -> End {
    move |e| e.blame(breaks, "the retry against the restarted driver: ")
}

/// A filesystem volume for a kill case: the skip when the suite cannot restart the driver.
async fn kill_volume(c: &mut Ctx) -> Result<Volume, End> {
    c.owned_driver()?;
    c.volume(&VolumeWish::default()).await
}

pub async fn kill_stage(c: &mut Ctx) -> Outcome {
    if !c.facts.node.stage_unstage {
        return Err(End::Skip(
            "the driver has no STAGE_UNSTAGE_VOLUME (the kubelet never calls NodeStageVolume)"
                .into(),
        ));
    }
    let v = kill_volume(c).await?;
    let first = c.stage(&v).await;
    killed_inside(c, first, "NodeStageVolume", upstream::KILL_STAGE).await?;
    c.stage(&v)
        .await
        .map_err(after_restart(upstream::KILL_STAGE))?;
    let path = c.publish(&v).await?;
    let io = probe::filesystem(&path, false).map_err(fail(upstream::KILL_STAGE))?;
    c.tear_down(&v).await?;
    Ok(format!(
        "killed inside NodeStageVolume, restarted, the retry staged; {io}"
    ))
}

pub async fn kill_publish(c: &mut Ctx) -> Outcome {
    let v = kill_volume(c).await?;
    c.stage(&v).await?;
    let first = c.publish(&v).await;
    killed_inside(c, first, "NodePublishVolume", upstream::KILL_PUBLISH).await?;
    let path = c
        .publish(&v)
        .await
        .map_err(after_restart(upstream::KILL_PUBLISH))?;
    let io = probe::filesystem(&path, false).map_err(fail(upstream::KILL_PUBLISH))?;
    c.tear_down(&v).await?;
    Ok(format!(
        "killed inside NodePublishVolume, restarted, the retry published; {io}"
    ))
}

pub async fn kill_unpublish(c: &mut Ctx) -> Outcome {
    let v = kill_volume(c).await?;
    let path = c.set_up(&v).await?;
    let first = c.unpublish(&v).await;
    killed_inside(c, first, "NodeUnpublishVolume", upstream::KILL_UNPUBLISH).await?;
    c.unpublish(&v)
        .await
        .map_err(after_restart(upstream::KILL_UNPUBLISH))?;
    if kcsi::is_mount_point(&path).unwrap_or(false) {
        return Err(check(
            format!(
                "the retried NodeUnpublishVolume answered OK, but {} is still mounted",
                path.display()
            ),
            upstream::KILL_UNPUBLISH,
        ));
    }
    c.unstage(&v).await?;
    c.nothing_mounted(upstream::KILL_UNPUBLISH)?;
    Ok("killed inside NodeUnpublishVolume, restarted, the retry unpublished".into())
}

pub async fn kill_unstage(c: &mut Ctx) -> Outcome {
    if !c.facts.node.stage_unstage {
        return Err(End::Skip(
            "the driver has no STAGE_UNSTAGE_VOLUME (the kubelet never calls NodeUnstageVolume)"
                .into(),
        ));
    }
    let v = kill_volume(c).await?;
    c.set_up(&v).await?;
    c.unpublish(&v).await?;
    let first = c.unstage(&v).await;
    killed_inside(c, first, "NodeUnstageVolume", upstream::KILL_UNSTAGE).await?;
    c.unstage(&v)
        .await
        .map_err(after_restart(upstream::KILL_UNSTAGE))?;
    c.nothing_mounted(upstream::KILL_UNSTAGE)?;
    Ok("killed inside NodeUnstageVolume, restarted, the retry unstaged".into())
}

pub async fn kill_expand(c: &mut Ctx) -> Outcome {
    cannot_expand(c)?;
    let v = kill_volume(c).await?;
    let path = c.set_up(&v).await?;
    grow(c, &v, upstream::KILL_EXPAND).await?;
    let first = node_expand_at(c, &v, &path).await;
    killed_inside(c, first, "NodeExpandVolume", upstream::KILL_EXPAND).await?;
    node_expand_at(c, &v, &path)
        .await
        .map_err(after_restart(upstream::KILL_EXPAND))?;
    let note = grown(c, &v, &path, upstream::KILL_EXPAND).await?;
    c.tear_down(&v).await?;
    Ok(format!(
        "killed inside NodeExpandVolume, restarted, the retry expanded{note}"
    ))
}

/// How a crash left a volume's vol_data.json.
#[derive(Clone, Copy, PartialEq)]
enum Lost {
    /// The pod volume dir's file is gone (kubernetes#101911, #116847).
    Missing,
    /// The pod's and the global file are 0 bytes (a crash between create and write, #108217).
    Empty,
}

pub async fn vol_data_missing(c: &mut Ctx) -> Outcome {
    vol_data_lost(c, Lost::Missing).await
}

pub async fn vol_data_empty(c: &mut Ctx) -> Outcome {
    vol_data_lost(c, Lost::Empty).await
}

/// A published volume, its vol_data.json lost as `how` says, a kubelet restart, then the
/// clean-up a kubelet can make from the PersistentVolume alone: NodeUnpublishVolume at the
/// target and NodeUnstageVolume at the global mount path, each twice.
async fn vol_data_lost(c: &mut Ctx, how: Lost) -> Outcome {
    let breaks = upstream::VOL_DATA_LOST;
    let v = c.volume(&VolumeWish::default()).await?;
    let target = c.set_up(&v).await?;
    let host = c.agent()?;
    let dir = host
        .layout()
        .pod_volume_dir(&v.pod_uid, &v.spec_name)
        .map_err(fail(breaks))?;
    let staging = steps::staging_path(host, &v).map_err(fail(breaks))?;
    let mut files = vec![dir.join("vol_data.json")];
    if how == Lost::Empty {
        files.extend(staging.parent().map(|p| p.join("vol_data.json")));
    }
    for f in &files {
        let done = match how {
            Lost::Missing => std::fs::remove_file(f),
            Lost::Empty => std::fs::File::create(f).map(drop),
        };
        done.map_err(|e| check(format!("cannot break {}: {e}", f.display()), breaks))?;
    }
    c.restart().await?;
    let host = c.agent()?;
    // Upstream's reconstruction fails here too; the note says why, in the file reader's words.
    let rebuilt = construct_volume_spec(host, &unique_volume_name(&v.driver, &v.handle), &dir)
        .err()
        .map_or("rebuilt it all the same".into(), |e| {
            let why = e.message().rsplit(": ").next().unwrap_or_default();
            format!("cannot rebuild it ({why})")
        });
    for n in ["", " repeated"] {
        rpc::node_unpublish(&c.channel, &v.handle, &target, c.timeout)
            .await
            .map_err(|e| fail(breaks)(e).blame(breaks, &format!("NodeUnpublishVolume{n}: ")))?;
    }
    if kcsi::is_mount_point(&target).unwrap_or(false) {
        return Err(check(
            format!(
                "NodeUnpublishVolume answered OK, but {} is still mounted",
                target.display()
            ),
            breaks,
        ));
    }
    if c.facts.node.stage_unstage {
        for n in ["", " repeated"] {
            rpc::node_unstage(&c.channel, &v.handle, &staging, c.timeout)
                .await
                .map_err(|e| fail(breaks)(e).blame(breaks, &format!("NodeUnstageVolume{n}: ")))?;
        }
    }
    c.torn_down(&v);
    c.nothing_mounted(breaks)?;
    Ok(format!(
        "{}; the restarted kubelet {rebuilt}; unpublished and unstaged by handle and path, \
         each twice",
        match how {
            Lost::Missing => "the pod's vol_data.json removed",
            Lost::Empty => "the pod's and the global vol_data.json emptied",
        }
    ))
}
