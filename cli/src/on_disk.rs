//! `kcsi list` and `kcsi reconstruct`: what the kubelet side left under a root, read from its
//! `vol_data.json` files; no driver needed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kcsi::inventory::{self, DataFile, Inventory, Kind};
use kcsi::reconstruct::construct_block_volume_spec;
use kcsi::reconstruct::construct_volume_spec;
use kcsi::unique_volume_name;
use kcsi::volume_data_keys as keys;
use kcsi::Files;
use serde_json::{json, Value};

use crate::args::RootCmd;
use crate::node;
use crate::UsageError;

fn walk(cmd: &RootCmd) -> Result<(PathBuf, Inventory), UsageError> {
    let root = node::absolute("--root", &cmd.root)?;
    if !root.is_dir() {
        return Err(UsageError(format!(
            "--root: {} is not a directory",
            root.display()
        )));
    }
    let found = inventory::walk(&Files::without_blanks(&root))
        .map_err(|e| UsageError(e.message().to_string()))?;
    Ok((root, found))
}

/// One line of `kcsi list`: staged volumes (kind `staged`, or `block`), then published ones.
struct Row<'a> {
    kind: &'static str,
    driver: Option<&'a str>,
    spec: Option<&'a str>,
    pod: Option<&'a str>,
    mount: &'a PathBuf,
    mounted: bool,
    data: &'a DataFile,
}

fn rows(found: &Inventory) -> Vec<Row<'_>> {
    let staged = found.staged.iter().map(|s| Row {
        kind: match s.kind {
            Kind::Filesystem => "staged",
            Kind::Block => "block",
        },
        driver: s.driver.as_deref(),
        spec: s.spec_name.as_deref(),
        pod: None,
        mount: &s.device_mount_path,
        mounted: s.mounted,
        data: &s.data,
    });
    let published = found.published.iter().map(|p| Row {
        kind: "published",
        driver: None,
        spec: Some(&p.spec_name),
        pod: Some(&p.pod_uid),
        mount: &p.mount_path,
        mounted: p.mounted,
        data: &p.data,
    });
    staged.chain(published).collect()
}

/// What a person does about a staged volume no pod dir under the root publishes (left staged
/// when a kubelet died between NodeUnpublishVolume and NodeUnstageVolume, kubernetes#85476),
/// which only kcsi's kubelet plugin unstages by itself; `None` for everything else. Block
/// publishes are not in the inventory, so a staged block volume always gets one.
fn action(r: &Row, published: &BTreeSet<(&str, &str)>, root: &Path) -> Option<String> {
    let driver = r.driver.or(r.data.get(keys::DRIVER_NAME))?;
    let unstage = format!(
        "kcsi unstage --endpoint <{driver}'s socket> --root {}",
        root.display()
    );
    let name = match (r.kind, r.spec) {
        ("block", Some(spec)) => format!(" --name {spec}"),
        ("block", None) | ("published", _) => return None,
        _ => String::new(),
    };
    let Some(handle) = r.data.get(keys::VOLUME_HANDLE) else {
        // Only a filesystem volume gets here (a block one's driver is in the lost file); its
        // dir is named after the SHA-256 of its handle. A file that is there but unreadable is
        // reported as such and left to a person: kcsi does not guess past it.
        if r.data.volume_data_file.exists() {
            return None;
        }
        let sha = r.mount.parent()?.file_name()?.to_string_lossy();
        return Some(format!(
            "its vol_data.json is lost, so no kubelet can unstage it: find the PersistentVolume of {driver} whose volumeHandle has SHA-256 {sha}; once no pod uses it: {unstage} --volume-handle <its volumeHandle>"
        ));
    };
    if r.kind == "staged" && published.contains(&(driver, handle)) {
        return None;
    }
    Some(format!(
        "if no pod uses it (kcsi's kubelet plugin unstages it by itself after a restart; upstream's never): {unstage} --volume-handle {handle}{name}"
    ))
}

fn row_json(r: &Row) -> Value {
    json!({
        "kind": r.kind,
        "driver": r.driver.or(r.data.get(keys::DRIVER_NAME)).unwrap_or(""),
        "volumeHandle": r.data.get(keys::VOLUME_HANDLE).unwrap_or(""),
        "specName": r.spec,
        "podUID": r.pod,
        "mountPath": r.mount,
        "mounted": r.mounted,
        "dir": r.data.dir(),
        "volumeData": r.data.volume_data,
        "error": r.data.volume_data_error,
    })
}

pub fn list(cmd: RootCmd, json: bool) -> Result<i32, UsageError> {
    let (root, found) = walk(&cmd)?;
    let found = rows(&found);
    let published: BTreeSet<(&str, &str)> = found
        .iter()
        .filter(|r| r.kind == "published")
        .filter_map(|r| {
            Some((
                r.data.get(keys::DRIVER_NAME)?,
                r.data.get(keys::VOLUME_HANDLE)?,
            ))
        })
        .collect();
    let actions: Vec<Option<String>> = found.iter().map(|r| action(r, &published, &root)).collect();
    if json {
        let volumes: Vec<Value> = found
            .iter()
            .zip(&actions)
            .map(|(r, action)| {
                let mut v = row_json(r);
                v["action"] = json!(action);
                v
            })
            .collect();
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
    for (r, action) in found.iter().zip(&actions) {
        let j = row_json(r);
        let s = |k: &str| j[k].as_str().unwrap_or("-").to_string();
        let mounted = if r.mounted { "yes" } else { "no" };
        println!(
            "{:<10} {:<24} {:<40} {:<20} {:<12} {:<8}",
            s("kind"),
            s("driver"),
            s("volumeHandle"),
            s("specName"),
            s("podUID"),
            mounted
        );
        if let Some(why) = &r.data.volume_data_error {
            println!("           unreadable: {why}");
        }
        if let Some(what) = action {
            println!("           to do: {what}");
        }
    }
    Ok(0)
}

pub fn reconstruct(cmd: RootCmd, json: bool) -> Result<i32, UsageError> {
    let (root, found) = walk(&cmd)?;
    let host = node::host(&root, &node::node_name(&cmd.node_name), 30.0, None)?;
    let published = found.published.iter().map(|p| {
        let field = |k| p.data.get(k).unwrap_or("");
        let name = unique_volume_name(field(keys::DRIVER_NAME), field(keys::VOLUME_HANDLE));
        let rebuilt = construct_volume_spec(&host, &name, p.data.dir())
            .map(|r| (Some(p.pod_uid.clone()), p.spec_name.clone(), json!(r.spec)));
        (p.data.dir(), rebuilt)
    });
    let block = found.staged.iter().filter_map(|s| {
        let spec_name = s.spec_name.as_ref().filter(|_| s.kind == Kind::Block)?;
        let map = host
            .layout()
            .block_global_map_path(spec_name)
            .unwrap_or_default();
        let rebuilt = construct_block_volume_spec(&host, "", spec_name, &map)
            .map(|spec| (None, spec_name.clone(), json!(spec)));
        Some((s.data.dir(), rebuilt))
    });
    let mut out = Vec::new();
    let mut ok = true;
    for (dir, rebuilt) in published.chain(block) {
        let item = match rebuilt {
            Ok((pod, spec_name, spec)) => {
                json!({"specName": spec_name, "podUID": pod, "spec": spec})
            }
            Err(err) => {
                ok = false;
                json!({"dir": dir, "error": err.message()})
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
