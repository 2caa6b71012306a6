//! API server outages: at host start and during registration. These stop and start this test
//! binary's own kube-apiserver, so they run one at a time.

use kcsi_testkit as common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::apiserver::*;
use common::{short_tempdir, wait_for, DriverProcess};
use kcsi::registration;
use kcsi::NodeAgent;
use kcsi::ANNOTATION_NODE_ID;
use kcsi::{ErrorClass, ErrorKind};

/// Outage tests must not overlap: each stops the shared API server.
static SERIAL: Mutex<()> = Mutex::new(());

fn host(node: &str) -> (tempfile::TempDir, NodeAgent) {
    let root = short_tempdir("kcsi-root");
    let config = ApiServer::shared().node_config(root.path(), node);
    (root, NodeAgent::new(config.check().unwrap()).unwrap())
}

/// Restarts the API server even when the test body panics.
struct RestartOnDrop;

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            ApiServer::shared().start_apiserver();
        }
    }
}

#[test]
fn api_server_down_at_host_start_reports_not_initialized_until_it_is_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let c = admin();
    let node = unique("down-at-start");
    create_node(&c, &node, &[], &[], &[]);
    let api = ApiServer::shared();
    api.stop_apiserver();
    let _restart = RestartOnDrop;

    // A host that waited for the API server would wait until it is back: a generous deadline
    // tells that apart from a slow start on a loaded machine.
    let start = Instant::now();
    let (_root, host) = host(&node);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "kcsi_host_new must not wait for the API server (took {:?})",
        start.elapsed()
    );
    // The host has tried the API server (and failed) before its state is read.
    wait_for(
        "API requests to the stopped server",
        Duration::from_secs(60),
        || host.status().api_requests.unwrap_or(0) >= 2,
    );
    let status = host.status();
    assert!(!status.csi_node_initialized);
    assert_eq!(
        status.last_error.as_deref(),
        Some("CSINode is not yet initialized")
    );
    assert_eq!(status.csi_drivers_synced, Some(false));
    let err = host.driver_facts("any.csi.example.com").unwrap_err();
    assert_eq!(
        (err.kind(), err.class()),
        (ErrorKind::Unavailable, ErrorClass::Transient),
        "{}",
        err.message()
    );

    api.start_apiserver();

    wait_for("csiNodeInitialized", Duration::from_secs(60), || {
        host.status().csi_node_initialized
    });
    assert_eq!(host.status().last_error, None);
    assert!(get_csinode(&c, &node).is_some());
    wait_for("CSIDriver list", Duration::from_secs(60), || {
        host.status().csi_drivers_synced == Some(true)
    });
}

#[test]
fn missing_node_reports_the_initialization_error_and_recovers_when_the_node_appears() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let c = admin();
    let node = unique("late-node");
    let (_root, host) = host(&node);
    wait_for("an initialization error", Duration::from_secs(30), || {
        host.status().last_error.is_some_and(|e| {
            e.starts_with("failed to initialize CSINode: error updating CSINode annotation:")
        })
    });
    assert!(host
        .status()
        .last_error
        .unwrap()
        .contains(&format!("nodes \"{node}\" not found")));
    create_node(&c, &node, &[], &[], &[]);
    // initBackoff pauses grow to ~15 s, so this may take a while.
    wait_for("csiNodeInitialized", Duration::from_secs(90), || {
        host.status().csi_node_initialized
    });
    assert_eq!(host.status().last_error, None);
}

#[test]
fn api_server_stopped_during_registration_leaves_the_driver_unregistered() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let c = admin();
    let node = unique("down-at-register");
    create_node(&c, &node, &[], &[], &[]);
    let name = format!("{node}.csi.example.com");
    let driver = DriverProcess::hostpath_named(&name, &name, &[]);
    let (_root, host) = host(&node);
    wait_for("csiNodeInitialized", Duration::from_secs(30), || {
        host.status().csi_node_initialized
    });
    let api = ApiServer::shared();
    api.stop_apiserver();
    let _restart = RestartOnDrop;

    let err = run(registration::register(
        &host,
        &driver.name,
        &driver.endpoint(),
        &["1.0.0".into()],
        None,
    ))
    .unwrap_err();

    assert_eq!(err.kind(), ErrorKind::Unavailable, "{}", err.message());
    assert_eq!(err.class(), ErrorClass::Transient);
    assert!(
        err.message().starts_with("error updating Node object with CSI driver node info: error updating node: timed out waiting for the condition; caused by:")
            && err.message().contains(&format!("get Node {node}: API server unreachable")),
        "{}",
        err.message()
    );
    assert!(
        host.drivers_status().is_empty(),
        "kcsi_list_drivers is empty"
    );
    assert!(
        host.drivers().get(&driver.name).is_none(),
        "the store holds no half registration"
    );

    api.start_apiserver();
    let n = get_node(&c, &node);
    assert!(annotation(&n, ANNOTATION_NODE_ID).is_none());
    assert!(get_csinode(&c, &node).unwrap().spec.drivers.is_empty());
    run(registration::register(
        &host,
        &driver.name,
        &driver.endpoint(),
        &["1.0.0".into()],
        None,
    ))
    .unwrap();
    assert!(annotation(&get_node(&c, &node), ANNOTATION_NODE_ID).is_some());
}
