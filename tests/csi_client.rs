//! A driver's connection, seen from the real csi-driver-host-path's side of its socket: one
//! connection reused across volume operations, closed once unused for the host's
//! `idleConnectionSeconds`, reopened on the next use, and closed with its registration.

use kcsi_testkit as common;

use std::time::Duration;

use common::capi::*;
use common::*;
use serde_json::json;

/// The idle period of the host whose connection a test watches close.
const IDLE: Duration = Duration::from_secs(2);
const SETTLE: Duration = Duration::from_secs(10);

/// A host whose driver connections close after `idle`, with `d` registered; returns once the
/// driver holds the one connection registration opened, and that connection.
fn host_with_driver(d: &DriverProcess, idle: Duration) -> (Host, u64) {
    let before = d.connections();
    let mut config = no_attach(json!({}));
    config["idleConnectionSeconds"] = json!(idle.as_secs_f64());
    let host = Host::new(config);
    host.register_driver(d);
    let opened = || -> Vec<u64> {
        let mut now = d.connections();
        now.retain(|c| !before.contains(c));
        now
    };
    wait_for("registration's connection", SETTLE, || opened().len() == 1);
    let conn = opened()[0];
    (host, conn)
}

/// A driver with no connections but the ones a test makes through kcsi (the harness's own
/// CreateVolume connection is gone), and one volume on it.
fn quiet_driver_with_volume() -> (DriverProcess, String) {
    let d = DriverProcess::hostpath("node-1", &[]);
    let handle = d.create_volume("idle-conn", false, 0);
    wait_for("the harness's connection to close", SETTLE, || {
        d.connections().is_empty()
    });
    (d, handle)
}

#[test]
fn idle_driver_connection_is_closed_and_reopened_on_next_use() {
    let (d, handle) = quiet_driver_with_volume();
    // A second host on the same driver whose connections idle out after an hour: its
    // connection outlives the first host's, so what closes that one is the host's idle period,
    // not anything that ends every connection.
    let (_kept_host, kept) = host_with_driver(&d, Duration::from_secs(3600));
    let (host, registered) = host_with_driver(&d, IDLE);
    wait_for("the idle connection to close", IDLE * 10, || {
        !d.connections().contains(&registered)
    });
    assert_eq!(
        d.connections(),
        vec![kept],
        "only the connection of the host with an hour's idle period is open"
    );
    let ours = || -> Vec<u64> { d.connections().into_iter().filter(|c| *c != kept).collect() };

    // The next use dials again: MountDevice (NodeGetCapabilities, NodeStageVolume) succeeds.
    let spec = json!({"persistentVolume": {
        "metadata": {"name": "pv-idle"},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": DRIVER, "volumeHandle": handle, "fsType": "ext4"}}
    }});
    let a = host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();
    a.mount_device(&spec, &dmp, None).unwrap();
    let reopened = ours();
    assert_eq!(
        reopened.len(),
        1,
        "one connection after reopening: {reopened:?}"
    );
    assert_ne!(
        reopened,
        [registered],
        "MountDevice dialed a new connection"
    );

    // Operations in quick succession share it: no dial per operation.
    a.unmount_device(&dmp).unwrap();
    a.mount_device(&spec, &dmp, None).unwrap();
    a.unmount_device(&dmp).unwrap();
    assert_eq!(
        ours(),
        reopened,
        "the operations reused the reopened connection"
    );
    assert_eq!(
        d.calls("NodeStageVolume").len(),
        2,
        "both MountDevices reached the driver"
    );
}

#[test]
fn deregistered_driver_connection_is_closed_before_it_is_idle() {
    let (d, _) = quiet_driver_with_volume();
    let (host, _) = host_with_driver(&d, Duration::from_secs(3600));
    host.deregister(&d.name);
    wait_for(
        "the deregistered driver's connection to close",
        SETTLE,
        || d.connections().is_empty(),
    );
}
