//! The CSINode allocatable updater (gate MutableCSINodeAllocatableCount, on by default) against a
//! real kube-apiserver and the real hostpath driver, whose `--maxvolumespernode` is changed by
//! restarting it: the count follows every `nodeAllocatableUpdatePeriodSeconds` (the API server
//! allows no less than 10 s), stops with deregistration and with `kcsi_host_free`, and is
//! refreshed at once by `kcsi_verify_exhausted_resource` when a VolumeAttachment failed with
//! ResourceExhausted.

use kcsi_testkit as common;

use std::ptr;
use std::time::{Duration, Instant};

use common::apiserver::*;
use common::capi::{call, cstr, take_string, Host};
use common::{short_tempdir, DriverProcess};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kcsi::attachment_name;
use kcsi::ffi::exhausted::kcsi_verify_exhausted_resource;
use kcsi::ffi::registration::kcsi_deregister_plugin;
use kcsi::ApiClient;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// The CSINode's `allocatable.count` for `driver`; `None` without an entry or count.
fn count(c: &ApiClient, node: &str, driver: &str) -> Option<i32> {
    get_csinode(c, node)?
        .spec
        .drivers
        .into_iter()
        .find(|d| d.name == driver)?
        .allocatable?
        .count
}

fn wait_for_count(
    c: &ApiClient,
    node: &str,
    driver: &str,
    want: Option<i32>,
    within: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let got = count(c, node, driver);
        if got == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "count {got:?}, want {want:?} within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The count stays `want` for `during`.
fn stays(c: &ApiClient, node: &str, driver: &str, want: Option<i32>, during: Duration) {
    let start = Instant::now();
    while start.elapsed() < during {
        assert_eq!(count(c, node, driver), want, "after {:?}", start.elapsed());
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn create_csidriver(c: &ApiClient, name: &str, period: Option<i64>) {
    let mut spec = json!({"attachRequired": true});
    if let Some(p) = period {
        spec["nodeAllocatableUpdatePeriodSeconds"] = json!(p);
    }
    let object: CSIDriver =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    run(Api::<CSIDriver>::all(c.client.clone()).create(&PostParams::default(), &object)).unwrap();
}

fn set_period(c: &ApiClient, name: &str, period: i64) {
    let patch = json!({"spec": {"nodeAllocatableUpdatePeriodSeconds": period}});
    run(Api::<CSIDriver>::all(c.client.clone()).patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&patch),
    ))
    .unwrap();
}

struct Setup {
    c: ApiClient,
    node: String,
    name: String,
    driver: DriverProcess,
    _root: tempfile::TempDir,
    host: Option<Host>,
}

/// A Node, a CSIDriver with `period`, the real hostpath driver reporting `max` volumes and a
/// host (with `extra` config) that registered it and has seen the CSIDriver.
fn setup(prefix: &str, period: Option<i64>, max: i64, extra: Value) -> Setup {
    let c = admin();
    let node = unique(prefix);
    create_node(&c, &node, &[], &[], &[]);
    let name = format!("{node}.hostpath.csi.k8s.io");
    create_csidriver(&c, &name, period);
    let driver =
        DriverProcess::hostpath_named(&name, &node, &[&format!("--maxvolumespernode={max}")]);
    let root = short_tempdir("kcsi-root");
    let mut config: Value =
        serde_json::from_str(&ApiServer::shared().host_config(root.path(), &node)).unwrap();
    config
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let host = Host::on_root(root.path(), config);
    // The updater reads the period from the watched CSIDriver objects.
    let start = Instant::now();
    loop {
        let s = host.status();
        if s["csiDriversSynced"] == json!(true) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "CSIDriver list");
        std::thread::sleep(Duration::from_millis(50));
    }
    host.register(&name, &driver.endpoint());
    assert_eq!(
        count(&c, &node, &name),
        Some(max as i32),
        "registration sets the count"
    );
    Setup {
        c,
        node,
        name,
        driver,
        _root: root,
        host: Some(host),
    }
}

impl Setup {
    fn host(&self) -> &Host {
        self.host.as_ref().unwrap()
    }

    fn deregister(&self) {
        let n = cstr(&self.name);
        call(|e| kcsi_deregister_plugin(self.host().ptr, n.as_ptr(), e)).unwrap();
    }

    fn spec(&self, handle: &str) -> Value {
        json!({"persistentVolume": {"metadata": {"name": format!("pv-{handle}")},
               "spec": {"csi": {"driver": self.name, "volumeHandle": handle}}}, "readOnly": false})
    }

    fn verify(&self, spec: &Value) -> bool {
        let s = cstr(&spec.to_string());
        let mut out = false;
        call(|e| kcsi_verify_exhausted_resource(self.host().ptr, s.as_ptr(), &mut out, e)).unwrap();
        out
    }

    /// The VolumeAttachment of `handle` as the external attacher leaves it after a failed
    /// ControllerPublishVolume with gRPC `code`.
    fn failed_attachment(&self, handle: &str, code: i32) {
        let api = Api::<VolumeAttachment>::all(self.c.client.clone());
        let name = attachment_name(handle, &self.name, &self.node);
        let va: VolumeAttachment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"attacher": self.name, "nodeName": self.node, "source": {"persistentVolumeName": format!("pv-{handle}")}}
        }))
        .unwrap();
        run(api.create(&PostParams::default(), &va)).unwrap();
        let status = json!({"status": {"attached": false, "attachError": {
            "message": "rpc error: code = ResourceExhausted desc = too many volumes", "errorCode": code,
            "time": "2026-01-01T00:00:00Z"}}});
        run(api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))).unwrap();
    }
}

#[test]
fn allocatable_count_follows_the_driver_every_period_until_deregistration() {
    let mut s = setup("nu-period", Some(10), 5, json!({}));
    s.driver.restart_with("--maxvolumespernode=3");
    let took = wait_for_count(&s.c, &s.node, &s.name, Some(3), Duration::from_secs(25));
    eprintln!("allocatable.count followed the driver after {took:?} (period 10 s)");
    // Deregistration removes the entry; the stopped updater must not bring it back.
    s.deregister();
    assert_eq!(count(&s.c, &s.node, &s.name), None);
    s.driver.restart_with("--maxvolumespernode=4");
    stays(&s.c, &s.node, &s.name, None, Duration::from_secs(12));
}

#[test]
fn host_free_stops_the_allocatable_updater() {
    let mut s = setup("nu-free", Some(10), 6, json!({}));
    drop(s.host.take());
    s.driver.restart_with("--maxvolumespernode=2");
    stays(&s.c, &s.node, &s.name, Some(6), Duration::from_secs(12));
}

#[test]
fn allocatable_updates_start_when_the_csidriver_gets_a_period_and_not_before() {
    let mut s = setup("nu-noperiod", None, 5, json!({}));
    s.driver.restart_with("--maxvolumespernode=3");
    stays(&s.c, &s.node, &s.name, Some(5), Duration::from_secs(11));
    set_period(&s.c, &s.name, 10);
    wait_for_count(&s.c, &s.node, &s.name, Some(3), Duration::from_secs(25));
}

#[test]
fn gate_off_means_no_periodic_updates() {
    let mut s = setup(
        "nu-gate",
        Some(10),
        5,
        json!({"featureGates": {"MutableCSINodeAllocatableCount": false}}),
    );
    s.driver.restart_with("--maxvolumespernode=3");
    stays(&s.c, &s.node, &s.name, Some(5), Duration::from_secs(12));
    s.failed_attachment("vol-gate", 8);
    assert!(
        !s.verify(&s.spec("vol-gate")),
        "no exhausted-resource check with the gate off"
    );
}

#[test]
fn resource_exhausted_attach_error_refreshes_the_count_at_once() {
    // A period too long to matter here: only the check updates.
    let mut s = setup("nu-exhausted", Some(3600), 5, json!({}));
    s.driver.restart_with("--maxvolumespernode=2");
    // No VolumeAttachment, another failure, an inline volume: false, nothing changes.
    assert!(!s.verify(&s.spec("vol-none")));
    s.failed_attachment("vol-other", 13);
    assert!(!s.verify(&s.spec("vol-other")));
    assert!(!s.verify(&json!({"volume": {"name": "v", "csi": {"driver": s.name}}})));
    assert_eq!(count(&s.c, &s.node, &s.name), Some(5));
    s.failed_attachment("vol-full", 8);
    let start = Instant::now();
    assert!(s.verify(&s.spec("vol-full")));
    eprintln!(
        "kcsi_verify_exhausted_resource refreshed the count in {:?}",
        start.elapsed()
    );
    assert_eq!(
        count(&s.c, &s.node, &s.name),
        Some(2),
        "updated before the call returned"
    );
    let mut list = ptr::null_mut();
    call(|e| kcsi::ffi::registration::kcsi_list_drivers(s.host().ptr, &mut list, e)).unwrap();
    let drivers: Value = serde_json::from_str(&take_string(list)).unwrap();
    assert_eq!(drivers[0]["maxVolumesPerNode"], json!(2), "{drivers}");
}

#[test]
fn exhausted_resource_check_needs_a_period_on_the_csidriver() {
    let mut s = setup("nu-exh-noperiod", None, 5, json!({}));
    s.driver.restart_with("--maxvolumespernode=2");
    s.failed_attachment("vol-full", 8);
    assert!(!s.verify(&s.spec("vol-full")));
    assert_eq!(count(&s.c, &s.node, &s.name), Some(5));
}

#[test]
fn exhausted_resource_check_refuses_bad_arguments() {
    let s = setup("nu-exh-bad", Some(3600), 5, json!({}));
    let mut out = false;
    let bad = cstr("{\"persistentVolume\": ");
    let e = call(|e| kcsi_verify_exhausted_resource(s.host().ptr, bad.as_ptr(), &mut out, e))
        .unwrap_err();
    assert_eq!(e.result, kcsi::ffi::KCSI_ERR_INVALID_ARGUMENT);
    assert!(e.message.contains("spec_json"), "{}", e.message);
    let e = call(|e| kcsi_verify_exhausted_resource(ptr::null_mut(), bad.as_ptr(), &mut out, e))
        .unwrap_err();
    assert_eq!(e.result, kcsi::ffi::KCSI_ERR_INVALID_ARGUMENT);
}
