//! `kcsi list` and `kcsi reconstruct`: what the kubelet side left under a root, read from its
//! `vol_data.json` files; no driver needed.

use kcsi::disk::inventory::{self, Entry, Place};
use kcsi::disk::paths::Layout;
use kcsi::volume::block::construct_block_volume_spec;
use kcsi::volume::reconstruct::construct_volume_spec;
use serde_json::{json, Value};

use crate::args::RootCmd;
use crate::node;
use crate::UsageError;

fn entries(cmd: &RootCmd) -> Result<(std::path::PathBuf, Vec<Entry>), UsageError> {
    let root = node::absolute("--root", &cmd.root)?;
    if !root.is_dir() {
        return Err(UsageError(format!(
            "--root: {} is not a directory",
            root.display()
        )));
    }
    let found =
        inventory::list(&Layout::new(&root)).map_err(|e| UsageError(e.message().to_string()))?;
    Ok((root, found))
}

fn field<'a>(e: &'a Entry, key: &str) -> &'a str {
    e.data
        .as_ref()
        .ok()
        .and_then(|d| d.get(key))
        .map_or("", String::as_str)
}

fn entry_json(e: &Entry) -> Value {
    let (kind, pod, spec, mount) = match &e.place {
        Place::Staged { mount_path } => ("staged", None, None, Some(mount_path)),
        Place::Published {
            pod_uid,
            spec_name,
            mount_path,
        } => (
            "published",
            Some(pod_uid),
            Some(spec_name),
            Some(mount_path),
        ),
        Place::Block { spec_name } => ("block", None, Some(spec_name), None),
    };
    json!({
        "kind": kind,
        "driver": field(e, "driverName"),
        "volumeHandle": field(e, "volumeHandle"),
        "specName": spec,
        "podUID": pod,
        "mountPath": mount,
        "mounted": e.mounted,
        "dir": e.dir,
        "volumeData": e.data.as_ref().ok(),
        "error": e.data.as_ref().err(),
    })
}

pub fn list(cmd: RootCmd, json: bool) -> Result<i32, UsageError> {
    let (root, found) = entries(&cmd)?;
    if json {
        let volumes: Vec<Value> = found.iter().map(entry_json).collect();
        println!("{}", json!({"root": root, "volumes": volumes}));
        return Ok(0);
    }
    if found.is_empty() {
        println!("nothing staged or published under {}", root.display());
        return Ok(0);
    }
    println!(
        "{:<10} {:<24} {:<40} {:<20} {:<12} {:<8}",
        "KIND", "DRIVER", "VOLUME HANDLE", "SPEC", "POD", "MOUNTED"
    );
    for e in &found {
        let j = entry_json(e);
        let s = |k: &str| j[k].as_str().unwrap_or("-").to_string();
        let mounted = match e.mounted {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        println!(
            "{:<10} {:<24} {:<40} {:<20} {:<12} {:<8}",
            s("kind"),
            s("driver"),
            s("volumeHandle"),
            s("specName"),
            s("podUID"),
            mounted
        );
        if let Err(why) = &e.data {
            println!("           unreadable: {why}");
        }
    }
    Ok(0)
}

pub fn reconstruct(cmd: RootCmd, json: bool) -> Result<i32, UsageError> {
    let (root, found) = entries(&cmd)?;
    let host = node::host(&root, &node::node_name(&cmd.node_name), 30.0, None)?;
    let mut out = Vec::new();
    let mut ok = true;
    for e in &found {
        let rebuilt = match &e.place {
            Place::Staged { .. } => continue,
            Place::Published {
                pod_uid, spec_name, ..
            } => {
                let name = format!("{}^{}", field(e, "driverName"), field(e, "volumeHandle"));
                construct_volume_spec(&host, &name, &e.dir.to_string_lossy())
                    .map(|r| (Some(pod_uid.clone()), spec_name.clone(), r["spec"].clone()))
            }
            Place::Block { spec_name } => {
                let map = host
                    .layout
                    .block_global_map_path(spec_name)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                construct_block_volume_spec(&host, "", spec_name, &map)
                    .map(|spec| (None, spec_name.clone(), spec))
            }
        };
        let item = match rebuilt {
            Ok((pod, spec_name, spec)) => {
                json!({"specName": spec_name, "podUID": pod, "spec": spec})
            }
            Err(err) => {
                ok = false;
                json!({"dir": e.dir, "error": err.message()})
            }
        };
        if !json {
            println!("{item}");
        }
        out.push(item);
    }
    if json {
        println!("{}", json!({"ok": ok, "volumes": out}));
    } else if out.is_empty() {
        println!("nothing to reconstruct under {}", root.display());
    }
    Ok(if ok { 0 } else { 1 })
}
