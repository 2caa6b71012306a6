//! The kubelet's crash paths: a stage or publish whose answer is lost (the call times out after
//! the driver did the work) and its retry, and a kubelet restart that rebuilds its volumes from
//! vol_data.json before tearing them down.

use kcsi::reconstruct::construct_volume_spec;
use kcsi::unique_volume_name;

use super::case::{check, fail, End, Outcome};
use super::ctx::{Ctx, VolumeWish};
use super::upstream;
use crate::probe;

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
