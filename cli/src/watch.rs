//! `kcsi watch`: a host with the plugin watcher on (host config `"pluginWatcher": true`),
//! reporting each driver that registers through `<root>/plugins_registry` or goes away, from
//! the node agent's status (`NodeAgent::status()`, the `kcsi_host_status` JSON), until interrupted.

use std::collections::BTreeMap;
use std::time::Duration;

use kcsi::HostConfig;
use kcsi::NodeAgent;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::WatchCmd;
use crate::node;
use crate::UsageError;

const POLL: Duration = Duration::from_millis(200);

fn drivers(host: &NodeAgent) -> BTreeMap<String, Value> {
    host.drivers_status()
        .into_iter()
        .map(|d| (d.name.clone(), json!(d)))
        .collect()
}

pub async fn run(cmd: WatchCmd, json: bool) -> Result<i32, UsageError> {
    let root = node::absolute("--root", &cmd.root)?;
    let node = node::node_name(&cmd.node_name);
    let config = HostConfig {
        plugin_watcher: true,
        ..HostConfig::node(&node, root)
    }
    .check()
    .map_err(|e| UsageError(format!("this kcsi cannot watch: {}", e.message())))?;
    let host = NodeAgent::start(config).map_err(|e| UsageError(e.message().to_string()))?;
    let (mut sigint, mut sigterm) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(i), Ok(t)) => (i, t),
        (Err(e), _) | (_, Err(e)) => return Err(UsageError(format!("cannot handle signals: {e}"))),
    };
    if !json {
        println!(
            "kcsi watch: node {node}, watching {} (Ctrl-C to stop)",
            host.layout().plugins_registry_dir().display()
        );
    }
    let mut known = BTreeMap::new();
    loop {
        let now = drivers(&host);
        for (name, d) in &now {
            if known.get(name) != Some(d) {
                if json {
                    println!("{}", json!({"event": "registered", "driver": d}));
                } else {
                    println!(
                        "registered {name} at {}: node id {}, max volumes {}, topology {}, CSI {}",
                        d["endpoint"].as_str().unwrap_or("?"),
                        d["nodeId"],
                        d["maxVolumesPerNode"],
                        d["topology"],
                        d["highestSupportedVersion"].as_str().unwrap_or("?")
                    );
                }
            }
        }
        for name in known.keys() {
            if !now.contains_key(name) {
                if json {
                    println!(
                        "{}",
                        json!({"event": "deregistered", "driver": {"name": name}})
                    );
                } else {
                    println!("deregistered {name}");
                }
            }
        }
        known = now;
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
        }
    }
    host.stop();
    Ok(0)
}
