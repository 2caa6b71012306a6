//! Registration against the real csi-driver-host-path, through the safe core and through the
//! C API.

use kcsi_testkit as common;

use std::os::unix::net::UnixListener;
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::capi::{call, cstr, take_json, CErr, Host as CHost};
use common::{driver_names, short_tempdir, DriverProcess, DRIVER};
use kcsi::ffi;
use kcsi::registration;
use kcsi::HostConfig;
use kcsi::NodeAgent;
use kcsi::{ErrorClass, ErrorKind};
use serde_json::json;

fn host(node: &str) -> (tempfile::TempDir, Arc<NodeAgent>) {
    let root = short_tempdir("kcsi-root");
    let config = HostConfig::node(node, root.path()).check().unwrap();
    (root, Arc::new(NodeAgent::new(config).unwrap()))
}

fn v(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_node_agent_checks_a_config_its_caller_did_not_check() {
    let root = short_tempdir("kcsi-root");
    let unchecked = HostConfig::node("", root.path());
    let err = NodeAgent::new(unchecked)
        .err()
        .expect("an empty nodeName is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message().contains("\"nodeName\" is required"),
        "{}",
        err.message()
    );
}

fn register(
    host: &NodeAgent,
    name: &str,
    endpoint: &str,
    versions: &[&str],
) -> kcsi::Result<kcsi::NodeInfo> {
    let versions = v(versions);
    kcsi::block_on(|| registration::register(host, name, endpoint, &versions, None)).unwrap()
}

#[test]
fn register_lists_node_info_and_deregister_removes_it() {
    let driver = DriverProcess::hostpath("node-a", &["--maxvolumespernode=7"]);
    let (_root, host) = host("node-a");
    let info = register(&host, DRIVER, &driver.endpoint(), &["1.0.0"]).unwrap();
    assert_eq!(info.node_id, "node-a");
    let list = serde_json::to_value(host.drivers_status()).unwrap();
    let d = &list[0];
    assert_eq!(d["name"], DRIVER);
    assert_eq!(d["endpoint"], driver.endpoint());
    assert_eq!(d["highestSupportedVersion"], "1.0.0");
    assert_eq!(d["nodeId"], "node-a");
    assert_eq!(d["maxVolumesPerNode"], 7);
    assert_eq!(d["topology"]["topology.hostpath.csi/node"], "node-a");
    kcsi::block_on(|| registration::deregister(&host, DRIVER))
        .unwrap()
        .unwrap();
    assert!(driver_names(&host).is_empty());
    let again = kcsi::block_on(|| registration::deregister(&host, DRIVER))
        .unwrap()
        .unwrap_err();
    assert_eq!(again.kind(), ErrorKind::NotFound);
}

#[test]
fn register_accepts_endpoint_with_unix_scheme() {
    let driver = DriverProcess::hostpath("node-a", &[]);
    let (_root, host) = host("node-a");
    register(
        &host,
        DRIVER,
        &format!("unix://{}", driver.endpoint()),
        &["v1.2.3"],
    )
    .unwrap();
    assert_eq!(
        serde_json::to_value(host.drivers_status()).unwrap()[0]["highestSupportedVersion"],
        "1.2.3"
    );
}

#[test]
fn validate_follows_upstream_version_table() {
    let (_root, host) = host("node-a");
    let ok: &[&[&str]] = &[
        &["v1.0.0"],
        &["0.2.0", "v1.0.0"],
        &["0.2.0", "v1.2.3"],
        &["v1.2.3", "v0.3.0"],
        &["v1.2.3", "v0.3.0", "2.0.1"],
        &["v1.2.3", "4.9.12", "v0.3.0", "2.0.1"],
        &["v1.2.3", "boo", "v0.3.0", "2.0.1"],
    ];
    for versions in ok {
        registration::validate(&host, "d", "/tmp/x.sock", &v(versions))
            .unwrap_or_else(|e| panic!("{versions:?}: {e}"));
    }
    let bad: &[&[&str]] = &[
        &["0.3.0"],
        &["0.2.0"],
        &["0.2.0", "v0.3.0"],
        &["4.9.12", "2.0.1"],
        &[],
        &["var", "boo", "foo"],
    ];
    for versions in bad {
        let err = registration::validate(&host, "d", "/tmp/x.sock", &v(versions)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsupportedVersion, "{versions:?}");
        assert!(err.message().starts_with("validation failed for CSI Driver d at endpoint /tmp/x.sock: kubernetes.io/csi: ValidatePlugin for CSI driver \"d\" failed."), "{}", err.message());
    }
    assert!(driver_names(&host).is_empty());
}

#[test]
fn register_rejects_0x_only_driver_with_upstream_message() {
    let driver = DriverProcess::hostpath("node-a", &[]);
    let (_root, host) = host("node-a");
    let err = register(&host, DRIVER, &driver.endpoint(), &["0.3.0"]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnsupportedVersion);
    assert_eq!(
        err.message(),
        "kubernetes.io/csi: RegisterPlugin for CSI driver \"hostpath.csi.k8s.io\" failed. None of the versions specified [\"0.3.0\"] are supported. err=highest supported version reported by driver is 0.3.0, must be v1.x"
    );
}

#[test]
fn register_rejects_same_version_and_accepts_higher_version() {
    let driver = DriverProcess::hostpath("node-a", &[]);
    let (_root, host) = host("node-a");
    register(&host, DRIVER, &driver.endpoint(), &["v1.0.0"]).unwrap();
    let err = register(&host, DRIVER, &driver.endpoint(), &["v1.0.0"]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert!(
        err.message()
            .ends_with("already registered with a higher supported version: \"1.0.0\""),
        "{}",
        err.message()
    );
    let lower = registration::validate(&host, DRIVER, &driver.endpoint(), &v(&["0.9.0", "1.0"]))
        .unwrap_err();
    assert_eq!(lower.kind(), ErrorKind::AlreadyExists);
    register(&host, DRIVER, &driver.endpoint(), &["v1.0.1"]).unwrap();
    assert_eq!(
        serde_json::to_value(host.drivers_status()).unwrap()[0]["highestSupportedVersion"],
        "1.0.1"
    );
    // A different name with the same version is fine.
    registration::validate(
        &host,
        "other.csi.k8s.io",
        &driver.endpoint(),
        &v(&["v1.0.0"]),
    )
    .unwrap();
}

#[test]
fn register_with_missing_socket_is_unavailable_and_rolled_back() {
    let (root, host) = host("node-a");
    let missing = root.path().join("nope.sock");
    let err = register(&host, DRIVER, missing.to_str().unwrap(), &["1.0.0"]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{}", err.message());
    assert_eq!(err.class(), ErrorClass::Transient);
    assert!(err.message().contains("nope.sock"), "{}", err.message());
    assert!(host.drivers().get(DRIVER).is_none());
    // Nothing was left behind: the same registration can be tried again.
    registration::validate(&host, DRIVER, missing.to_str().unwrap(), &v(&["1.0.0"])).unwrap();
}

#[test]
fn register_times_out_on_a_socket_that_never_answers() {
    // Fault injection no real driver offers on demand: a socket that accepts nothing.
    let dir = short_tempdir("kcsi-silent");
    let path = dir.path().join("silent.sock");
    let _silent_listener = UnixListener::bind(&path).unwrap();
    let (_root, host) = host("node-a");
    let start = Instant::now();
    let versions = v(&["1.0.0"]);
    let err = kcsi::block_on(|| {
        registration::register(
            &host,
            DRIVER,
            path.to_str().unwrap(),
            &versions,
            Some(Duration::from_millis(300)),
        )
    })
    .unwrap()
    .unwrap_err();
    let took = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{}", err.message());
    assert!(
        took < Duration::from_secs(5),
        "deadline not honoured: {took:?}"
    );
    assert!(host.drivers().get(DRIVER).is_none());
}

#[test]
fn register_rejects_unsafe_driver_names_and_endpoints() {
    let (_root, host) = host("node-a");
    for name in ["", "..", "../x", "/abs", "a//b", "a\nb"] {
        let err = register(&host, name, "/tmp/x.sock", &["1.0.0"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{name:?}");
    }
    for endpoint in [
        "",
        "relative.sock",
        "unix://",
        &format!("/{}", "x".repeat(200)),
    ] {
        let err = register(&host, "d", endpoint, &["1.0.0"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{endpoint:?}");
    }
}

#[test]
fn sixteen_concurrent_registrations_all_succeed() {
    let driver = DriverProcess::hostpath("node-a", &[]);
    let (_root, host) = host("node-a");
    let endpoint = driver.endpoint();
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let host = host.clone();
            let endpoint = endpoint.clone();
            std::thread::spawn(move || {
                register(
                    &host,
                    &format!("driver-{i:02}.csi.k8s.io"),
                    &endpoint,
                    &["1.0.0"],
                )
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    assert_eq!(driver_names(&host).len(), 16);
}

#[test]
fn concurrent_registrations_of_one_name_admit_exactly_one() {
    let driver = DriverProcess::hostpath("node-a", &[]);
    let (_root, host) = host("node-a");
    let endpoint = driver.endpoint();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let host = host.clone();
            let endpoint = endpoint.clone();
            std::thread::spawn(move || register(&host, DRIVER, &endpoint, &["1.0.0"]))
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    assert!(results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| e.kind() == ErrorKind::AlreadyExists));
}

#[test]
fn two_hosts_never_see_each_others_drivers() {
    let driver = DriverProcess::hostpath("node-a", &[]);
    let (_r1, h1) = host("node-a");
    let (_r2, h2) = host("node-b");
    register(&h1, DRIVER, &driver.endpoint(), &["1.0.0"]).unwrap();
    assert_eq!(driver_names(&h1), vec![DRIVER]);
    assert!(driver_names(&h2).is_empty());
    // The same name registers independently on the other host.
    register(&h2, DRIVER, &driver.endpoint(), &["1.0.0"]).unwrap();
    kcsi::block_on(|| registration::deregister(&h1, DRIVER))
        .unwrap()
        .unwrap();
    assert_eq!(driver_names(&h2), vec![DRIVER]);
}

#[test]
fn reregistration_after_driver_restart_uses_a_fresh_connection() {
    let mut driver = DriverProcess::hostpath("node-a", &[]);
    let (_root, host) = host("node-a");
    register(&host, DRIVER, &driver.endpoint(), &["1.0.0"]).unwrap();
    driver.restart();
    kcsi::block_on(|| registration::deregister(&host, DRIVER))
        .unwrap()
        .unwrap();
    register(&host, DRIVER, &driver.endpoint(), &["1.0.0"]).unwrap();
    let d = host.drivers().get(DRIVER).unwrap();
    let info = kcsi::block_on(|| {
        d.client
            .node_get_info(tokio::time::Instant::now() + Duration::from_secs(10))
    })
    .unwrap()
    .unwrap();
    assert_eq!(info.node_id, "node-a");
}

// ---- the same flows through the C API ----

/// kcsi_register_plugin of `name` at `endpoint` with the versions given as C strings.
fn c_register(
    h: &CHost,
    name: &str,
    endpoint: &str,
    versions: &[*const std::ffi::c_char],
) -> Result<(), CErr> {
    let (name, endpoint) = (cstr(name), cstr(endpoint));
    call(|e| {
        ffi::registration::kcsi_register_plugin(
            h.ptr,
            name.as_ptr(),
            endpoint.as_ptr(),
            versions.as_ptr(),
            versions.len(),
            0,
            e,
        )
    })
}

#[test]
fn c_api_register_list_deregister_round_trip() {
    let driver = DriverProcess::hostpath("node-c", &[]);
    let h = CHost::new(json!({"nodeName": "node-c"}));
    let v1 = cstr("1.0.0");
    c_register(&h, DRIVER, &driver.endpoint(), &[v1.as_ptr()]).unwrap();

    let err = c_register(&h, DRIVER, &driver.endpoint(), &[v1.as_ptr()]).unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (ffi::KCSI_ERR_ALREADY_EXISTS, ffi::KCSI_CLASS_FINAL)
    );
    assert!(
        err.message.contains("already registered"),
        "{}",
        err.message
    );

    let mut json = ptr::null_mut();
    call(|e| ffi::registration::kcsi_list_drivers(h.ptr, &mut json, e)).unwrap();
    assert_eq!(take_json(json)[0]["nodeId"], "node-c");

    h.deregister(DRIVER);
    let name = cstr(DRIVER);
    let err =
        call(|e| ffi::registration::kcsi_deregister_plugin(h.ptr, name.as_ptr(), e)).unwrap_err();
    assert_eq!(err.result, ffi::KCSI_ERR_NOT_FOUND);
}

#[test]
fn c_api_rejects_null_version_element_without_registering() {
    let h = CHost::new(json!({"nodeName": "node-c"}));
    let err = c_register(&h, DRIVER, "/tmp/x.sock", &[ptr::null()]).unwrap_err();
    assert_eq!(err.result, ffi::KCSI_ERR_INVALID_ARGUMENT);
    assert_eq!(err.message, "versions[0] is NULL");
    assert_eq!(h.status()["drivers"], json!([]), "{}", h.status());
}
