//! What an operator and a driver author see of kcsi: `csi_operations_seconds` and kcsi's own
//! series (`kcsi_host_metrics`), one trace record per CSI call, secrets never logged, and
//! transport failures that name their cause. Against the real csi-driver-host-path and a real
//! kube-apiserver (for Secrets and service-account tokens).

use kcsi_testkit as common;

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::apiserver::*;
use common::capi::{check, cstr, pv_spec, take_string, CErr, Host as CHost};
use common::{unmount_below, DriverProcess};
use k8s_openapi::api::core::v1::{Node, Pod, Secret, ServiceAccount};
use k8s_openapi::api::storage::v1::CSIDriver;
use kcsi::ffi::log::kcsi_set_log_callback;
use kcsi::ffi::mounter::*;
use kube::api::Api;
use serde_json::{json, Value};

const NS: &str = "default";
const PASSWORD: &str = "hunter2-stage-and-publish";

/// Log routing is process-wide: tests that capture it run one at a time.
static LOG_TESTS: Mutex<()> = Mutex::new(());
static LOGS: Mutex<Vec<(i32, String, String)>> = Mutex::new(Vec::new());

unsafe extern "C" fn capture(
    _: *mut c_void,
    level: i32,
    target: *const c_char,
    msg: *const c_char,
) {
    let (target, msg) = unsafe { (CStr::from_ptr(target), CStr::from_ptr(msg)) };
    LOGS.lock().unwrap().push((
        level,
        target.to_string_lossy().into_owned(),
        msg.to_string_lossy().into_owned(),
    ));
}

fn set_log(cb: kcsi::ffi::log::kcsi_log_fn, data: *mut c_void, level: i32) {
    let mut err = ptr::null_mut();
    check(kcsi_set_log_callback(cb, data, level, &mut err), err).unwrap();
}

/// One sample line of the text format: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

fn parse_samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("sample line");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once("=\"").expect("label");
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            (name.to_string(), labels, value.parse().expect("value"))
        })
        .collect()
}

/// `csi_operations_seconds_count` per (method, code) for `driver`.
fn csi_counts(samples: &[Sample], driver: &str) -> BTreeMap<(String, String), f64> {
    samples
        .iter()
        .filter(|(n, l, _)| n == "csi_operations_seconds_count" && l["driver_name"] == driver)
        .map(|(_, l, v)| {
            assert_eq!(l["migrated"], "false");
            (
                (l["method_name"].clone(), l["grpc_status_code"].clone()),
                *v,
            )
        })
        .collect()
}

/// Node RPCs the real driver logged (`GRPC call: /csi.v1.Node/...` at -v=5), per method.
fn driver_calls(driver: &DriverProcess) -> BTreeMap<String, f64> {
    let mut calls = BTreeMap::new();
    for line in driver.log().lines() {
        if let Some(rest) = line.split("GRPC call: ").nth(1) {
            let method = rest.split_whitespace().next().unwrap_or("");
            if method.starts_with("/csi.v1.Node/") {
                *calls.entry(method.to_string()).or_insert(0.0) += 1.0;
            }
        }
    }
    calls
}

fn mounter(host: &CHost, spec: &Value, pod: &Pod) -> Result<(), CErr> {
    let (s, p) = (
        cstr(&spec.to_string()),
        cstr(&serde_json::to_string(pod).unwrap()),
    );
    let (mut m, mut err) = (ptr::null_mut(), ptr::null_mut());
    check(
        kcsi_mounter_new(host.ptr, s.as_ptr(), p.as_ptr(), &mut m, &mut err),
        err,
    )?;
    let result = check(kcsi_mounter_set_up(m, ptr::null(), &mut err), err);
    kcsi_mounter_free(m);
    result
}

fn tear_down(host: &CHost, spec_name: &str, pod_uid: &str) {
    let (s, p) = (cstr(spec_name), cstr(pod_uid));
    let (mut u, mut err) = (ptr::null_mut(), ptr::null_mut());
    check(
        kcsi_unmounter_new(host.ptr, s.as_ptr(), p.as_ptr(), &mut u, &mut err),
        err,
    )
    .unwrap();
    let result = check(kcsi_unmounter_tear_down(u, &mut err), err);
    kcsi_unmounter_free(u);
    result.unwrap();
}

#[test]
fn real_lifecycle_is_measured_once_per_rpc_and_traced_without_secrets() {
    let _serial = LOG_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    let admin = admin();
    let node = unique("obs-node");
    let driver_name = format!("{}.csi.k8s.io", unique("obs"));
    create_node(&admin, &node, &[], &[], &[]);
    create::<CSIDriver>(
        Api::all(admin.client.clone()),
        json!({"metadata": {"name": driver_name}, "spec": {
            "attachRequired": false, "podInfoOnMount": true,
            "tokenRequests": [{"audience": "kcsi-obs", "expirationSeconds": 600}]}}),
    );
    let secret = unique("obs-secret");
    create::<Secret>(
        Api::namespaced(admin.client.clone(), NS),
        json!({"metadata": {"name": secret}, "stringData": {"password": PASSWORD}}),
    );
    let sa = unique("sa");
    create::<ServiceAccount>(
        Api::namespaced(admin.client.clone(), NS),
        json!({"metadata": {"name": sa}}),
    );
    let pod = create::<Pod>(
        Api::namespaced(admin.client.clone(), NS),
        json!({"metadata": {"name": unique("pod")},
               "spec": {"serviceAccountName": sa, "nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}),
    );
    let pod_uid = pod.metadata.uid.clone().unwrap();

    let driver = DriverProcess::hostpath_named(&driver_name, &node, &[]);
    let root = common::short_tempdir("kcsi-root");
    let config: Value =
        serde_json::from_str(&ApiServer::shared().host_config(root.path(), &node)).unwrap();
    let host = CHost::from_config(&config);
    let status = || -> Value {
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi::ffi::host::kcsi_host_status(host.ptr, &mut out, &mut err),
            err,
        )
        .unwrap();
        serde_json::from_str(&take_string(out)).unwrap()
    };
    common::wait_for("CSIDriver objects listed", Duration::from_secs(30), || {
        status()["csiDriversSynced"] == true
    });

    LOGS.lock().unwrap().clear();
    set_log(Some(capture), ptr::null_mut(), 4);
    let run_lifecycle = || -> Result<String, CErr> {
        host.register(&driver_name, &driver.endpoint());
        let handle = driver.create_volume("obs-pv", false, 1 << 20);
        let secret_ref = json!({"name": secret, "namespace": NS});
        let spec = json!({"persistentVolume": {"metadata": {"name": "obs-pv"}, "spec": {
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": driver_name, "volumeHandle": handle,
                    "nodeStageSecretRef": secret_ref, "nodePublishSecretRef": secret_ref}}}});
        let a = host.attacher();
        let dmp = a.device_mount_path(&spec)?;
        a.mount_device(&spec, &dmp, None)?;
        mounter(&host, &spec, &pod)?;
        tear_down(&host, "obs-pv", &pod_uid);
        a.unmount_device(&dmp)?;
        // A volume the driver never created: NodePublishVolume fails with NotFound.
        let unknown = json!({"persistentVolume": {"metadata": {"name": "obs-missing"}, "spec": {
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": driver_name, "volumeHandle": "no-such-volume"}}}});
        let missing_dmp = a.device_mount_path(&unknown)?;
        let err = a.mount_device(&unknown, &missing_dmp, None).unwrap_err();
        Ok(err.message)
    };
    let outcome = run_lifecycle();
    set_log(None, ptr::null_mut(), 1);
    let logs = LOGS.lock().unwrap().clone();
    unmount_below(root.path());
    let failure = outcome.unwrap();
    assert!(failure.contains("code = NotFound"), "{failure}");

    // One observation per RPC the driver saw, with upstream's names and labels.
    let text = host.metrics_text();
    assert!(
        text.contains("# TYPE csi_operations_seconds histogram"),
        "{text}"
    );
    let samples = parse_samples(&text);
    let counts = csi_counts(&samples, &driver_name);
    let mut observed: BTreeMap<String, f64> = BTreeMap::new();
    for ((method, _), n) in &counts {
        *observed.entry(method.clone()).or_insert(0.0) += n;
    }
    assert_eq!(
        observed,
        driver_calls(&driver),
        "metrics vs. the driver's own log: {counts:?}"
    );
    for method in [
        "NodeGetInfo",
        "NodeGetCapabilities",
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeUnstageVolume",
    ] {
        let key = (format!("/csi.v1.Node/{method}"), "OK".to_string());
        assert!(
            counts.get(&key).is_some_and(|n| *n >= 1.0),
            "{method} OK in {counts:?}"
        );
    }
    let failed = (
        "/csi.v1.Node/NodeStageVolume".to_string(),
        "NotFound".to_string(),
    );
    assert_eq!(counts.get(&failed), Some(&1.0), "{counts:?}");
    let buckets: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("csi_operations_seconds_bucket") && l.contains("NodeGetInfo"))
        .map(|l| l.split("le=\"").nth(1).unwrap().split('"').next().unwrap())
        .collect();
    assert_eq!(
        buckets,
        [
            "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "15", "25", "50", "120", "300", "600",
            "+Inf",
        ]
    );
    let sample = |name: &str, key: &str, value: &str| {
        samples
            .iter()
            .find(|(n, l, _)| n == name && l.get(key).map(String::as_str) == Some(value))
            .map(|s| s.2)
    };
    assert_eq!(
        sample("kcsi_driver_registrations_total", "result", "success"),
        Some(1.0)
    );
    assert!(text.contains("\nkcsi_registered_drivers 1\n"), "{text}");
    assert!(
        sample("kcsi_api_requests_total", "verb", "get").unwrap() >= 2.0,
        "Secret GETs: {text}"
    );
    assert!(
        sample("kcsi_api_requests_total", "verb", "create").unwrap() >= 1.0,
        "TokenRequest: {text}"
    );
    assert!(
        sample("kcsi_api_requests_total", "verb", "watch").unwrap() >= 1.0,
        "CSIDriver watch: {text}"
    );
    assert!(
        sample("kcsi_api_requests_total", "verb", "list").unwrap() >= 1.0,
        "CSIDriver list: {text}"
    );

    // One debug record per RPC, naming method, driver, volume, code and duration.
    let calls: Vec<&String> = logs
        .iter()
        .filter(|(lvl, _, m)| *lvl == 3 && m.starts_with("CSI call ") && m.contains(&driver_name))
        .map(|(_, _, m)| m)
        .collect();
    assert_eq!(
        calls.len() as f64,
        observed.values().sum::<f64>(),
        "{calls:#?}"
    );
    for call in &calls {
        for field in [
            "driver=",
            "method=\"/csi.v1.Node/",
            "volume=",
            "code=\"",
            "duration=",
        ] {
            assert!(call.contains(field), "{field} in {call}");
        }
    }
    assert!(calls.iter().any(|c| c.contains("NodeStageVolume")
        && c.contains("volume=\"no-such-volume\"")
        && c.contains("code=\"NotFound\"")));
    // Requests and responses at trace; upstream's V(4) lifecycle steps at debug.
    let has = |lvl: i32, text: &str| logs.iter().any(|(l, _, m)| *l == lvl && m.contains(text));
    assert!(has(4, "CSI request") && has(4, "NodePublishVolumeRequest"));
    assert!(has(4, "CSI response"));
    for step in [
        "attacher.MountDevice(",
        "Mounter.SetUpAt(",
        "mounter.SetUp successfully requested NodePublish",
        "Unmounter.TearDownAt(",
        "attacher.UnmountDevice(",
    ] {
        assert!(has(3, step), "lifecycle step {step}");
    }
    assert!(logs
        .iter()
        .any(|(_, _, m)| m.contains(&format!("pod=\"{pod_uid}\""))));
    // Secrets and tokens at no level; no library internals.
    assert!(!logs.is_empty());
    let token_seen = logs.iter().any(|(_, _, m)| m.contains("\"token\":"));
    assert!(!token_seen, "a service-account token reached the log");
    for (level, target, message) in &logs {
        assert!(
            !message.contains(PASSWORD),
            "level {level} {target}: {message}"
        );
        assert!(
            target.starts_with("kcsi"),
            "library record: {target} {message}"
        );
    }
    let _ = run(Api::<Node>::all(admin.client.clone()).delete(&node, &Default::default()));
}

#[test]
fn transport_failures_name_their_cause_and_count_as_unavailable() {
    let dir = common::short_tempdir("kcsi-dial");
    let root = common::short_tempdir("kcsi-root");
    let host = CHost::from_config(&json!({"nodeName": "n", "rootDir": root.path()}));
    let register = |name: &str, endpoint: &str| {
        let (n, e, v) = (cstr(name), cstr(endpoint), cstr("1.0.0"));
        let versions = [v.as_ptr()];
        let mut err = ptr::null_mut();
        let rc = kcsi::ffi::registration::kcsi_register_plugin(
            host.ptr,
            n.as_ptr(),
            e.as_ptr(),
            versions.as_ptr(),
            1,
            5_000,
            &mut err,
        );
        check(rc, err).unwrap_err()
    };
    let missing = dir.path().join("missing.sock");
    let e = register("missing.example.com", missing.to_str().unwrap());
    assert!(
        e.message.contains(&format!(
            "dial unix {}: connect: no such file or directory",
            missing.display()
        )),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("rpc error: code = Unavailable"),
        "{}",
        e.message
    );
    // A socket file nobody listens on.
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let e = register("stale.example.com", stale.to_str().unwrap());
    assert!(
        e.message.contains("connect: connection refused"),
        "{}",
        e.message
    );

    let samples = parse_samples(&host.metrics_text());
    for driver in ["missing.example.com", "stale.example.com"] {
        let counts = csi_counts(&samples, driver);
        assert_eq!(
            counts,
            BTreeMap::from([(
                (
                    "/csi.v1.Node/NodeGetInfo".to_string(),
                    "Unavailable".to_string()
                ),
                1.0
            )])
        );
    }
    let failures = samples
        .iter()
        .find(|(n, l, _)| n == "kcsi_driver_registrations_total" && l["result"] == "failure");
    assert_eq!(failures.map(|s| s.2), Some(2.0));
}

#[test]
fn standalone_publish_of_an_attachable_driver_says_how_to_fix_it() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = common::short_tempdir("kcsi-root");
    let host = CHost::from_config(&json!({"nodeName": "node-1", "rootDir": root.path()}));
    host.register(common::DRIVER, &driver.endpoint());
    let spec = pv_spec("pv-sa", "vol-sa", false, json!({}), json!({}));
    let a = host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();
    let e = a.mount_device(&spec, &dmp, None).unwrap_err();
    assert_eq!(e.class, kcsi::ffi::KCSI_CLASS_TRANSIENT, "{}", e.message);
    assert!(
        e.message.contains("\"attachRequired\": false"),
        "{}",
        e.message
    );
    assert!(e.message.contains("\"csiDrivers\""), "{}", e.message);
    assert!(e.message.contains("\"kubeconfig\""), "{}", e.message);
    unmount_below(root.path());
}

/// The callback's user data: marked dead before it is freed, so a delivery still running
/// after `kcsi_set_log_callback` returned is caught.
struct Receiver {
    alive: AtomicU32,
}

static LATE_DELIVERIES: AtomicUsize = AtomicUsize::new(0);
static DELIVERIES: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn slow_receiver(data: *mut c_void, _: i32, _: *const c_char, _: *const c_char) {
    let receiver = unsafe { &*(data as *const Receiver) };
    DELIVERIES.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(Duration::from_micros(200));
    if receiver.alive.load(Ordering::SeqCst) != 1 {
        LATE_DELIVERIES.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn set_log_callback_returns_only_after_deliveries_to_the_old_callback_ended() {
    let _serial = LOG_TESTS.lock().unwrap_or_else(|p| p.into_inner());
    let root = common::short_tempdir("kcsi-root");
    let host = Arc::new(CHost::from_config(
        &json!({"nodeName": "n", "rootDir": root.path()}),
    ));
    let stop = Arc::new(AtomicU32::new(0));
    // Threads that log all the time: validation logs "Register new plugin" at info.
    let loggers: Vec<_> = (0..4)
        .map(|i| {
            let (host, stop) = (host.clone(), stop.clone());
            std::thread::spawn(move || {
                let (n, e, v) = (
                    cstr(&format!("log{i}.example.com")),
                    cstr("/tmp/x.sock"),
                    cstr("1.0.0"),
                );
                let versions = [v.as_ptr()];
                while stop.load(Ordering::SeqCst) == 0 {
                    let mut err = ptr::null_mut();
                    let rc = kcsi::ffi::registration::kcsi_validate_plugin(
                        host.ptr,
                        n.as_ptr(),
                        e.as_ptr(),
                        versions.as_ptr(),
                        1,
                        &mut err,
                    );
                    let _ = check(rc, err);
                }
            })
        })
        .collect();
    for _ in 0..200 {
        let receiver = Box::into_raw(Box::new(Receiver {
            alive: AtomicU32::new(1),
        }));
        set_log(Some(slow_receiver), receiver.cast(), 2);
        std::thread::sleep(Duration::from_micros(300));
        set_log(None, ptr::null_mut(), 0);
        // Freed right after the swap, as the contract allows.
        unsafe { (*receiver).alive.store(0, Ordering::SeqCst) };
        drop(unsafe { Box::from_raw(receiver) });
    }
    stop.store(1, Ordering::SeqCst);
    for t in loggers {
        t.join().unwrap();
    }
    set_log(None, ptr::null_mut(), 1);
    assert!(DELIVERIES.load(Ordering::SeqCst) > 0, "the loggers logged");
    assert_eq!(LATE_DELIVERIES.load(Ordering::SeqCst), 0);
}
