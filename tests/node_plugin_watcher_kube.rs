//! The plugin watcher with a kubeconfig, against a real kube-apiserver: a driver registered
//! through the real node-driver-registrar leaves the Node and CSINode exactly as a driver
//! registered by hand, and its registrar's exit cleans them up the same way.

use kcsi_testkit as common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::apiserver::*;
use common::plugin_peers::{Hostpath, Registrar};
use common::{short_tempdir, wait_for};
use kcsi::registration;
use kcsi::HostConfig;
use kcsi::NodeAgent;
use serde_json::json;

const DRIVER: &str = "hostpath.csi.k8s.io";
const WAIT: Duration = Duration::from_secs(30);

fn start_host(root: &Path, node: &str) -> Arc<NodeAgent> {
    let config = HostConfig {
        plugin_watcher: true,
        ..ApiServer::shared().node_config(root, node)
    };
    let _rt = kcsi::runtime_handle().unwrap().enter();
    NodeAgent::start(config.check().unwrap()).unwrap()
}

/// What registration writes, with the node's name replaced so two nodes compare.
fn snapshot(c: &kcsi::ApiClient, node: &str) -> String {
    let n = get_node(c, node);
    let status = n.status.unwrap_or_default();
    let csinode = get_csinode(c, node).map(|cn| drivers_json(&cn));
    json!({
        "labels": n.metadata.labels,
        "annotations": n.metadata.annotations,
        "capacity": status.capacity,
        "allocatable": status.allocatable,
        "csinodeDrivers": csinode,
    })
    .to_string()
    .replace(node, "NODE")
}

#[test]
fn registrar_registration_leaves_node_and_csinode_exactly_as_registering_by_hand() {
    let c = admin();
    let by_hand = unique("pw-hand");
    let watched = unique("pw-watch");
    for n in [&by_hand, &watched] {
        create_node(&c, n, &[], &[], &[]);
    }
    let root_a = short_tempdir("kcsi-kw");
    let root_b = short_tempdir("kcsi-kw");
    let host_a = start_host(root_a.path(), &by_hand);
    let host_b = start_host(root_b.path(), &watched);
    let driver_a = Hostpath::start(root_a.path(), DRIVER, &by_hand);
    let driver_b = Hostpath::start(root_b.path(), DRIVER, &watched);
    wait_for("CSINodes initialised", WAIT, || {
        host_a.status().csi_node_initialized && host_b.status().csi_node_initialized
    });

    run(registration::register(
        &host_a,
        DRIVER,
        driver_a.socket.to_str().unwrap(),
        &["1.0.0".to_string()],
        None,
    ))
    .unwrap();
    let mut registrar = Registrar::for_driver(&driver_b, &root_b.path().join("plugins_registry"));
    wait_for("registered through the watcher", WAIT, || {
        host_b
            .plugin_watcher_status()
            .is_some_and(|w| w.sockets.first().is_some_and(|s| s.state == "registered"))
    });
    let registered = snapshot(&c, &by_hand);
    assert!(registered.contains(DRIVER), "{registered}");
    assert_eq!(snapshot(&c, &watched), registered);

    run(registration::deregister(&host_a, DRIVER)).unwrap();
    registrar.process.stop_with(libc::SIGTERM);
    let deregistered = snapshot(&c, &by_hand);
    wait_for("deregistered through the watcher", WAIT, || {
        snapshot(&c, &watched) == deregistered
    });
    assert!(get_csinode(&c, &watched).unwrap().spec.drivers.is_empty());
    host_a.stop();
    host_b.stop();
}
