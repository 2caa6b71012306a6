//! The external-attacher's side: ControllerPublish / ControllerUnpublish to the node, and the
//! node's attach limit.

use super::case::{check, fail, End, Outcome};
use super::ctx::{csi_mode, Ctx, VolumeWish};
use super::upstream;
use crate::driver;

/// More than this many volumes is too slow to make for one case.
const MAX_LIMIT: i64 = 16;

fn needs_attach(c: &Ctx) -> Result<(), End> {
    if c.facts.publish_unpublish {
        Ok(())
    } else {
        Err(End::Skip(
            "the driver has no Controller PUBLISH_UNPUBLISH_VOLUME".into(),
        ))
    }
}

/// ControllerPublishVolume of a filesystem volume to NodeGetInfo's node ID, as the
/// external-attacher sends it.
async fn publish(
    c: &Ctx,
    handle: &str,
    wish: &VolumeWish,
) -> kcsi::Result<std::collections::BTreeMap<String, String>> {
    driver::controller_publish(
        &c.channel,
        driver::Publish {
            volume_id: handle,
            node_id: &c.facts.node_id,
            block: false,
            fs_type: "",
            mount_flags: Vec::new(),
            access_mode: csi_mode(&c.facts, wish.access_mode),
            read_only: false,
            volume_context: Default::default(),
            secrets: Default::default(),
        },
        c.timeout,
    )
    .await
}

pub async fn controller_publish(c: &mut Ctx) -> Outcome {
    needs_attach(c)?;
    let wish = VolumeWish::default();
    // Attached once on the way (ControllerPublishVolume to NodeGetInfo's node ID).
    let v = c.volume(&wish).await?;
    let context = publish(c, &v.handle, &wish)
        .await
        .map_err(|e| fail(upstream::ATTACH)(e.context("the repeated ControllerPublishVolume")))?;
    // The publish context reaches NodeStage and NodePublish.
    let path = c.set_up(&v).await?;
    c.tear_down(&v).await?;
    for n in ["", "the repeated "] {
        driver::controller_unpublish(
            &c.channel,
            &v.handle,
            &c.facts.node_id,
            Default::default(),
            c.timeout,
        )
        .await
        .map_err(|e| fail(upstream::DETACH)(e.context(format!("{n}ControllerUnpublishVolume"))))?;
    }
    c.forget_attached(&v.handle);
    Ok(format!(
        "attached twice to node ID {:?} (publish context {context:?}), staged and published at \
         {}, detached twice",
        c.facts.node_id,
        path.display()
    ))
}

pub async fn limit(c: &mut Ctx) -> Outcome {
    needs_attach(c)?;
    let max = c.facts.max_volumes;
    if max <= 0 {
        return Err(End::Skip(
            "NodeGetInfo answered no max_volumes_per_node".into(),
        ));
    }
    if max > MAX_LIMIT {
        return Err(End::Skip(format!(
            "max_volumes_per_node {max} is more than the {MAX_LIMIT} volumes this case makes"
        )));
    }
    for _ in 0..max {
        c.volume(&VolumeWish::default()).await?;
    }
    let wish = VolumeWish {
        attach: false,
        ..Default::default()
    };
    let extra = c.volume(&wish).await?;
    c.attached(&extra.handle);
    match publish(c, &extra.handle, &wish).await {
        Err(e) if e.grpc_code() == Some(tonic::Code::ResourceExhausted as i32) => Ok(format!(
            "{max} volumes attached, the next one refused: {}",
            e.message()
        )),
        Err(e) => Err(fail(upstream::ATTACH_LIMIT)(e)),
        Ok(_) => Err(check(
            format!(
                "NodeGetInfo answered max_volumes_per_node {max}, but ControllerPublishVolume of \
                 volume {} to the node answered OK",
                max + 1
            ),
            upstream::ATTACH_LIMIT,
        )),
    }
}
