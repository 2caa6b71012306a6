//! The single-step commands. Each runs one kubelet step against the driver; the state between
//! commands is what the kubelet keeps on disk under the root (`vol_data.json`), so `stage`,
//! `publish`, `unpublish` and `unstage` may run in separate invocations, as after a restart.

use std::collections::BTreeMap;
use std::time::Duration;

use kcsi::NodeAgent;
use kcsi::{node_expand, ExpandOptions};

use crate::args::{DriverArgs, ExpandCmd, PublishedCmd, VolumeCmd};
use crate::node::{self, Volume};
use crate::session::{Done, Session, Stop};
use crate::steps;
use crate::UsageError;

/// A session with the driver identified and registered on a host rooted at `root`.
struct Ready {
    s: Session,
    host: NodeAgent,
    driver: String,
}

async fn ready(
    args: &DriverArgs,
    json: bool,
    root: &std::path::Path,
    attach: bool,
) -> Result<Result<Ready, i32>, UsageError> {
    let t = args.timeout;
    if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
        return Err(UsageError(format!(
            "--timeout {t}: must be > 0 and at most 86400"
        )));
    }
    let root = node::absolute("--root", root)?;
    let mut s = Session::start(
        &args.endpoint,
        args.fault.clone(),
        json,
        Duration::from_secs_f64(t),
    )?;
    let driver = match steps::identify(&mut s, args.driver.as_deref()).await {
        Ok(d) => d,
        Err(Stop) => {
            let e = s.report.steps.last().and_then(|s| s.error.clone());
            eprintln!("kcsi: {}", e.unwrap_or_else(|| "interrupted".into()));
            s.report.summary();
            return Ok(Err(exit_code(&s)));
        }
    };
    let csidriver = node::csidriver(args, &driver, attach)?;
    let host = node::host(
        &root,
        &node::node_name(&args.node_name),
        t,
        Some(&csidriver),
    )?;
    if steps::register(&mut s, &host, &driver, "register")
        .await
        .is_err()
    {
        s.report.summary();
        return Ok(Err(exit_code(&s)));
    }
    Ok(Ok(Ready { s, host, driver }))
}

fn exit_code(s: &Session) -> i32 {
    if s.interrupted {
        130
    } else if s.report.ok() {
        0
    } else {
        1
    }
}

fn finish(r: Ready) -> i32 {
    r.s.report.summary();
    exit_code(&r.s)
}

fn volume(r: &Ready, cmd: &VolumeCmd) -> Result<Volume, UsageError> {
    node::secrets_file(&cmd.volume)?;
    let attach = node::attach_required(&r.host, &r.driver);
    node::volume(
        &r.driver,
        &cmd.volume_handle,
        &cmd.volume,
        &BTreeMap::new(),
        attach,
    )
}

/// Undoes a step the user interrupted (it may have completed in the driver).
async fn undo_interrupted(r: &mut Ready, v: &Volume, published: bool) {
    if !r.s.interrupted {
        return;
    }
    r.s.cleaning = true;
    if published {
        let _ = steps::unpublish(&mut r.s, &r.host, v.block, &v.spec_name, &v.pod_uid).await;
    } else {
        let _ = steps::unstage(
            &mut r.s,
            &r.host,
            v.block,
            &v.driver,
            &v.handle,
            &v.spec_name,
        )
        .await;
    }
}

pub async fn stage(cmd: VolumeCmd, json: bool) -> Result<i32, UsageError> {
    let attach = !cmd.volume.publish_context.is_empty();
    let mut r = match ready(&cmd.driver, json, &cmd.root, attach).await? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let v = volume(&r, &cmd)?;
    if steps::attach_wait(&mut r.s, &r.host, &v).await.is_ok()
        && steps::stage(&mut r.s, &r.host, &v).await.is_err()
    {
        undo_interrupted(&mut r, &v, false).await;
    }
    Ok(finish(r))
}

pub async fn publish(cmd: VolumeCmd, json: bool) -> Result<i32, UsageError> {
    let attach = !cmd.volume.publish_context.is_empty();
    let mut r = match ready(&cmd.driver, json, &cmd.root, attach).await? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let v = volume(&r, &cmd)?;
    if steps::publish(&mut r.s, &r.host, &v).await.is_err() {
        undo_interrupted(&mut r, &v, true).await;
    }
    Ok(finish(r))
}

fn spec_name(cmd: &PublishedCmd) -> String {
    cmd.name
        .clone()
        .unwrap_or_else(|| node::spec_name_for(&cmd.volume_handle))
}

pub async fn unpublish(cmd: PublishedCmd, json: bool) -> Result<i32, UsageError> {
    let mut r = match ready(&cmd.driver, json, &cmd.root, false).await? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let name = spec_name(&cmd);
    let block = steps::is_block(&r.host, &name);
    let _ = steps::unpublish(&mut r.s, &r.host, block, &name, &cmd.pod_uid).await;
    Ok(finish(r))
}

pub async fn unstage(cmd: PublishedCmd, json: bool) -> Result<i32, UsageError> {
    let mut r = match ready(&cmd.driver, json, &cmd.root, false).await? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let name = spec_name(&cmd);
    let block = steps::is_block(&r.host, &name);
    let driver = r.driver.clone();
    let _ = steps::unstage(&mut r.s, &r.host, block, &driver, &cmd.volume_handle, &name).await;
    Ok(finish(r))
}

pub async fn stats(cmd: PublishedCmd, json: bool) -> Result<i32, UsageError> {
    let mut r = match ready(&cmd.driver, json, &cmd.root, false).await? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let name = spec_name(&cmd);
    let block = steps::is_block(&r.host, &name);
    let path = steps::target_path(&r.host, block, &name, &cmd.pod_uid)
        .map_err(|e| UsageError(e.message().to_string()))?;
    let driver = r.driver.clone();
    let _ = steps::stats(&mut r.s, &r.host, &driver, &cmd.volume_handle, &path).await;
    Ok(finish(r))
}

pub async fn expand(cmd: ExpandCmd, json: bool) -> Result<i32, UsageError> {
    let c = &cmd.cmd;
    let attach = !c.volume.publish_context.is_empty();
    let mut r = match ready(&c.driver, json, &c.root, attach).await? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let v = volume(&r, c)?;
    let staging =
        steps::staging_path(&r.host, &v).map_err(|e| UsageError(e.message().to_string()))?;
    let target = steps::target_path(&r.host, v.block, &v.spec_name, &v.pod_uid)
        .map_err(|e| UsageError(e.message().to_string()))?;
    let opts = ExpandOptions {
        spec: v.spec.clone(),
        device_path: if v.block {
            target.display().to_string()
        } else {
            String::new()
        },
        device_mount_path: target.display().to_string(),
        device_stage_path: staging.display().to_string(),
        new_size: cmd.new_size.clone(),
        old_size: None,
    };
    if cmd.controller {
        let bytes = kcsi::parse_bytes(&cmd.new_size)
            .map_err(|e| UsageError(format!("--new-size: {}", e.message())))?;
        let secrets = node::secrets_file(&c.volume)?.controller_expand_volume_secret;
        let (ch, timeout, id) = (r.s.channel.clone(), r.s.timeout, v.handle.clone());
        let grown =
            r.s.step("controller expand", async move {
                let (size, node) =
                    crate::driver::controller_expand(&ch, &id, bytes, secrets, timeout).await?;
                let note = format!("capacity {size} B, node expansion required: {node}");
                Ok(Done::Value((), Some(note)))
            })
            .await;
        if grown.is_err() {
            return Ok(finish(r));
        }
    }
    let host = &r.host;
    let _ =
        r.s.step("expand", async {
            node_expand(host, &opts).await?;
            Ok(Done::Value(
                (),
                Some(format!("expanded to {}", opts.new_size)),
            ))
        })
        .await;
    Ok(finish(r))
}
