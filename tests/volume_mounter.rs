//! Mounter / unmounter / metrics / reconstruction through the C API against the real
//! csi-driver-host-path, with real bind mounts (run as root). Tests that inject a fault use
//! csi-fault-driver (without staging, so they need no NodeStage); the VOLUME_MOUNT_GROUP test
//! uses the e2e mock driver, which has that capability.

use kcsi_testkit as common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::time::Duration;

use common::capi::*;
use common::*;
use kcsi::ffi::mounter::*;
use kcsi::ffi::*;
use kcsi::proto::csi::volume_capability::access_mode::Mode;
use serde_json::{json, Value};

const POD_UID: &str = "test-pod";

fn pod(uid: &str) -> Value {
    json!({
        "metadata": {"name": "test-pod", "namespace": "test-ns", "uid": uid},
        "spec": {"serviceAccountName": "test-service-account", "containers": []}
    })
}

fn pv_spec(name: &str, handle: &str) -> Value {
    json!({"persistentVolume": {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "mountOptions": ["foo=bar", "baz=qux"],
            "csi": {"driver": DRIVER, "volumeHandle": handle, "fsType": "ext4", "volumeAttributes": {"foo": "bar"}}
        }
    }, "readOnly": false})
}

fn inline_spec(name: &str) -> Value {
    json!({"volume": {"name": name, "csi": {"driver": DRIVER, "fsType": "ext4", "volumeAttributes": {"foo": "bar"}}}})
}

/// A new volume on `d`, staged at `host`'s global mount path (the attacher's job, done
/// directly here): hostpathplugin publishes only what was staged at that exact path.
fn staged_volume(d: &DriverProcess, host: &Host, name: &str) -> (String, PathBuf) {
    let handle = d.create_volume(name, false, 0);
    let staging = host.layout().device_mount_path(DRIVER, &handle).unwrap();
    std::fs::create_dir_all(&staging).unwrap();
    d.stage(&handle, &staging);
    (handle, staging)
}

/// A PV `name` on `driver`, a fresh host with the driver registered, and the PV's mounter.
struct Volume {
    m: Mounter,
    node: Host,
    driver: DriverProcess,
    handle: String,
}

impl Volume {
    /// For a driver without staging (the fault driver's tests).
    fn new(driver: DriverProcess, config: Value, name: &str) -> Volume {
        let handle = driver.create_volume(name, false, 0);
        Self::with(driver, config, name, handle)
    }

    /// Staged first, for the real hostpath driver.
    fn staged(driver: DriverProcess, config: Value, name: &str) -> Volume {
        let node = Host::new(config);
        let (handle, _) = staged_volume(&driver, &node, name);
        Self::on(driver, node, name, handle)
    }

    fn with(driver: DriverProcess, config: Value, name: &str, handle: String) -> Volume {
        Self::on(driver, Host::new(config), name, handle)
    }

    fn on(driver: DriverProcess, node: Host, name: &str, handle: String) -> Volume {
        node.register_driver(&driver);
        let m = node
            .mounter(&pv_spec(name, &handle), &pod(POD_UID))
            .unwrap();
        Volume {
            m,
            node,
            driver,
            handle,
        }
    }
}

fn last_publish(d: &DriverProcess) -> Value {
    d.last_request("NodePublishVolume")
}

fn vol_data(mount_path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(mount_path.parent().unwrap().join("vol_data.json")).unwrap(),
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn filesystem_pv_is_published_written_measured_and_torn_down() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let node = Host::new(no_attach(json!({"podInfoOnMount": true})));
    node.register_driver(&driver);
    let (handle, staging) = staged_volume(&driver, &node, "pv-1");

    let m = node
        .mounter(&pv_spec("test-pv", &handle), &pod(POD_UID))
        .unwrap();
    let path = m.path();
    assert_eq!(
        path,
        node.root()
            .join("pods/test-pod/volumes/kubernetes.io~csi/test-pv/mount")
    );
    m.set_up(None).unwrap();
    assert!(is_mount_point(&path));
    let parent_mode = std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777;
    assert_eq!(parent_mode, 0o750);

    // Data written through the pod's path lands in the driver's volume.
    std::fs::write(path.join("hello.txt"), "through the pod").unwrap();
    let backing = driver.volume_path(&handle).join("hello.txt");
    assert_eq!(std::fs::read_to_string(backing).unwrap(), "through the pod");

    let req = last_publish(&driver);
    assert_eq!(req["volume_id"], handle.as_str());
    assert_eq!(req["target_path"], path.display().to_string());
    assert_eq!(req["staging_target_path"], staging.display().to_string());
    assert_eq!(mount_capability(&req)["fs_type"], "ext4");
    assert_eq!(
        mount_capability(&req)["mount_flags"],
        json!(["foo=bar", "baz=qux"])
    );
    assert!(mount_capability(&req).get("volume_mount_group").is_none());
    // The driver has SINGLE_NODE_MULTI_WRITER: ReadWriteOnce maps to it.
    assert_eq!(
        req["volume_capability"]["access_mode"]["mode"],
        Mode::SingleNodeMultiWriter as i32
    );
    assert_eq!(
        req["volume_context"],
        json!({
            "foo": "bar",
            "csi.storage.k8s.io/pod.name": "test-pod",
            "csi.storage.k8s.io/pod.namespace": "test-ns",
            "csi.storage.k8s.io/pod.uid": POD_UID,
            "csi.storage.k8s.io/serviceAccount.name": "test-service-account",
            "csi.storage.k8s.io/ephemeral": "false"
        })
    );
    assert!(
        req.get("publish_context").is_none(),
        "no attach, no publish context"
    );

    let file = std::fs::read_to_string(path.parent().unwrap().join("vol_data.json")).unwrap();
    let attachment = kcsi::attachment_name(&handle, DRIVER, "node-1");
    assert_eq!(
        file,
        format!(
            "{{\"attachmentID\":\"{attachment}\",\"driverName\":\"{DRIVER}\",\"nodeName\":\"node-1\",\
             \"specVolID\":\"test-pv\",\"volumeHandle\":\"{handle}\",\"volumeLifecycleMode\":\"Persistent\"}}\n"
        )
    );

    let metrics = m.metrics().unwrap();
    assert!(metrics["capacityBytes"].as_i64().unwrap() > 0, "{metrics}");
    assert!(metrics["usedBytes"].as_i64().unwrap() > 0);
    assert!(metrics["inodes"].as_i64().unwrap() > 0);
    assert!(metrics["time"].as_str().unwrap().ends_with('Z'));
    assert!(
        metrics.get("abnormal").is_none(),
        "condition only with CSIVolumeHealth"
    );

    node.tear_down("test-pv", POD_UID).unwrap();
    assert!(!is_mount_point(&path));
    assert!(
        !path.parent().unwrap().exists(),
        "mount dir and vol_data.json removed"
    );
    assert!(driver.requests("NodeUnpublishVolume").len() == 1);
    driver.unstage(&handle, &staging);
}

#[test]
fn ephemeral_inline_volume_is_created_on_publish_and_removed_on_teardown() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let modes = json!({"volumeLifecycleModes": ["Ephemeral"], "podInfoOnMount": true});
    let node = Host::new(json!({"csiDrivers": [csi_driver(modes)]}));
    node.register_driver(&driver);

    let m = node
        .mounter(&inline_spec("test-vol"), &pod(POD_UID))
        .unwrap();
    m.set_up(None).unwrap();
    let path = m.path();
    assert!(is_mount_point(&path));
    let handle = kcsi::ephemeral_volume_handle(POD_UID, "test-vol");
    assert_eq!(
        handle,
        "csi-77b4ec2e40cdc3e4fe6faa47461d327e48a98aadcbdafbf723ce9a664a5bb118"
    );
    let req = last_publish(&driver);
    assert_eq!(req["volume_id"], handle.as_str());
    assert!(
        req.get("staging_target_path").is_none(),
        "inline volumes are never staged"
    );
    assert_eq!(
        req["volume_context"]["csi.storage.k8s.io/ephemeral"],
        "true"
    );
    assert_eq!(req["volume_context"]["foo"], "bar");
    assert_eq!(vol_data(&path)["volumeLifecycleMode"], "Ephemeral");
    assert!(driver.volume_path(&handle).is_dir());

    node.tear_down("test-vol", POD_UID).unwrap();
    assert!(!path.parent().unwrap().exists());
    assert!(
        !driver.volume_path(&handle).exists(),
        "driver deleted the ephemeral volume"
    );
}

#[test]
fn lifecycle_mode_not_supported_by_driver_is_transient() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let no_csidriver = Host::new(json!({}));
    no_csidriver.register_driver(&driver);
    let err = no_csidriver
        .mounter(&inline_spec("v"), &pod(POD_UID))
        .unwrap()
        .set_up(None)
        .unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_NOT_SUPPORTED, KCSI_CLASS_TRANSIENT)
    );
    assert_eq!(
        err.message,
        format!(
            "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: \
             volume mode \"Ephemeral\" not supported by driver {DRIVER} (no CSIDriver object)"
        )
    );

    let ephemeral_only = Host::new(no_attach(json!({"volumeLifecycleModes": ["Ephemeral"]})));
    ephemeral_only.register_driver(&driver);
    let handle = driver.create_volume("pv-x", false, 0);
    let err = ephemeral_only
        .mounter(&pv_spec("pv", &handle), &pod(POD_UID))
        .unwrap()
        .set_up(None)
        .unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT);
    assert!(
        err.message.ends_with(&format!("volume mode \"Persistent\" not supported by driver {DRIVER} (only supports [\"Ephemeral\"])")),
        "{}",
        err.message
    );
    assert!(driver.requests("NodePublishVolume").is_empty());
}

#[test]
fn mounter_path_follows_kubelet_layout() {
    let node = Host::new(json!({}));
    for (name, dir) in [
        ("spec-0", "spec-0"),
        ("test.spec.1", "test.spec.1"),
        ("a/b", "a~b"),
    ] {
        let m = node.mounter(&pv_spec(name, "h"), &pod(POD_UID)).unwrap();
        assert_eq!(
            m.path(),
            node.root().join(format!(
                "pods/test-pod/volumes/kubernetes.io~csi/{dir}/mount"
            ))
        );
    }
}

#[test]
fn path_tricks_are_rejected() {
    let node = Host::new(json!({}));
    for uid in ["..", ".", "a/b", "/abs", ""] {
        let err = node
            .mounter(&pv_spec("pv", "h"), &pod(uid))
            .err()
            .expect(uid);
        assert_eq!(
            err.result, KCSI_ERR_INVALID_ARGUMENT,
            "{uid}: {}",
            err.message
        );
        let err = node.unmounter("pv", uid).err().expect(uid);
        assert_eq!(
            err.result, KCSI_ERR_INVALID_ARGUMENT,
            "{uid}: {}",
            err.message
        );
    }
    for spec in ["..", "."] {
        let err = node
            .mounter(&pv_spec(spec, "h"), &pod(POD_UID))
            .err()
            .expect(spec);
        assert_eq!(err.result, KCSI_ERR_INVALID_ARGUMENT);
        assert_eq!(
            node.unmounter(spec, POD_UID).err().expect(spec).result,
            KCSI_ERR_INVALID_ARGUMENT
        );
    }
    // A NUL cannot pass through C; JSON can carry one.
    let err = node
        .mounter(&pv_spec("a\0b", "h"), &pod(POD_UID))
        .err()
        .unwrap();
    assert_eq!(err.result, KCSI_ERR_INVALID_ARGUMENT);
    let err = node
        .mounter(&pv_spec("pv", "h"), &pod("u\0"))
        .err()
        .unwrap();
    assert_eq!(err.result, KCSI_ERR_INVALID_ARGUMENT);

    let inside = node.root().join("pods/u/volumes/kubernetes.io~csi/pv");
    for bad in [
        PathBuf::from("relative/pods/x"),
        PathBuf::from("/etc"),
        node.root().join("pods/u/../../../etc"),
        node.root().join("pods"),
        node.root().join("plugins/x"),
    ] {
        let err = node.construct(&bad).unwrap_err();
        assert_eq!(
            err.result,
            KCSI_ERR_INVALID_ARGUMENT,
            "{}: {}",
            bad.display(),
            err.message
        );
    }
    assert_eq!(
        node.construct(&inside).unwrap_err().result,
        KCSI_ERR_NOT_FOUND
    );

    // NULL arguments and output pointers.
    let mut m = ptr::null_mut();
    let err =
        call(|e| kcsi_mounter_new(node.ptr, ptr::null(), ptr::null(), &mut m, e)).unwrap_err();
    assert_eq!(err.result, KCSI_ERR_INVALID_ARGUMENT);
    assert_eq!(
        call(|e| kcsi_mounter_set_up(ptr::null_mut(), ptr::null(), e))
            .unwrap_err()
            .result,
        KCSI_ERR_INVALID_ARGUMENT
    );
    kcsi_mounter_free(ptr::null_mut());
    kcsi_unmounter_free(ptr::null_mut());
}

#[test]
fn set_up_rejects_unknown_args_keys() {
    let node = Host::new(json!({}));
    let m = node.mounter(&pv_spec("pv", "h"), &pod(POD_UID)).unwrap();
    let err = m.set_up(Some(json!({"fsUser": 1}))).unwrap_err();
    assert_eq!(err.result, KCSI_ERR_INVALID_ARGUMENT);
    assert!(err.message.contains("fsUser"), "{}", err.message);
}

#[test]
fn selinux_context_is_appended_last_and_recorded_only_when_enabled() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let gate_on = Host::new(json!({
        "featureGates": {"SELinuxMountReadWriteOncePod": true},
        "csiDrivers": [csi_driver(json!({"attachRequired": false, "seLinuxMount": true}))]
    }));
    let mut off = no_attach(json!({"seLinuxMount": true}));
    off["featureGates"] = json!({"SELinuxMountReadWriteOncePod": false});
    let gate_off = Host::new(off);
    gate_on.register_driver(&driver);
    gate_off.register_driver(&driver);
    let label = json!({"seLinuxLabel": "s0,c0"});

    let (h1, _) = staged_volume(&driver, &gate_on, "pv-se1");
    let m = gate_on
        .mounter(&pv_spec("pv-se1", &h1), &pod("pod-a"))
        .unwrap();
    m.set_up(Some(label.clone())).unwrap();
    let flags = mount_capability(&last_publish(&driver))["mount_flags"].clone();
    assert_eq!(flags, json!(["foo=bar", "baz=qux", "context=\"s0,c0\""]));
    assert_eq!(vol_data(&m.path())["seLinuxMountContext"], "s0,c0");
    let rebuilt = gate_on.construct(m.path().parent().unwrap()).unwrap();
    assert_eq!(rebuilt["seLinuxMountContext"], "s0,c0");

    // No label: no option, never `context=""`.
    let (h2, _) = staged_volume(&driver, &gate_on, "pv-se2");
    let m2 = gate_on
        .mounter(&pv_spec("pv-se2", &h2), &pod("pod-b"))
        .unwrap();
    m2.set_up(Some(json!({"seLinuxLabel": ""}))).unwrap();
    assert_eq!(
        mount_capability(&last_publish(&driver))["mount_flags"],
        json!(["foo=bar", "baz=qux"])
    );
    assert!(vol_data(&m2.path()).get("seLinuxMountContext").is_none());

    // Gate off: no option even with a label.
    let (h3, _) = staged_volume(&driver, &gate_off, "pv-se3");
    let m3 = gate_off
        .mounter(&pv_spec("pv-se3", &h3), &pod("pod-c"))
        .unwrap();
    m3.set_up(Some(label)).unwrap();
    assert_eq!(
        mount_capability(&last_publish(&driver))["mount_flags"],
        json!(["foo=bar", "baz=qux"])
    );
    assert!(vol_data(&m3.path()).get("seLinuxMountContext").is_none());

    gate_on.tear_down("pv-se1", "pod-a").unwrap();
    gate_on.tear_down("pv-se2", "pod-b").unwrap();
    gate_off.tear_down("pv-se3", "pod-c").unwrap();
}

#[test]
fn fs_group_goes_to_volume_mount_group_when_driver_supports_it() {
    // hostpathplugin lacks VOLUME_MOUNT_GROUP; the e2e mock driver has it (and mounts nothing).
    let driver = DriverProcess::mock(DRIVER, &["--disable-attach", "--volume-mount-group"]);
    let node = Host::new(no_attach(json!({})));
    node.register_driver(&driver);
    let handle = driver.create_volume("pv-vmg", false, 0);
    let m = node
        .mounter(&pv_spec("pv-vmg", &handle), &pod(POD_UID))
        .unwrap();
    m.set_up(Some(json!({"fsGroup": 3000}))).unwrap();
    let req = last_publish(&driver);
    assert_eq!(mount_capability(&req)["volume_mount_group"], "3000");
    assert_eq!(
        req["volume_context"],
        json!({"foo": "bar"}),
        "no pod info without podInfoOnMount"
    );
    // SetUp again (a republish) is idempotent.
    m.set_up(Some(json!({"fsGroup": 3000}))).unwrap();
    assert_eq!(driver.requests("NodePublishVolume").len(), 2);
    assert_ne!(
        std::fs::metadata(m.path()).unwrap().gid(),
        3000,
        "the group is the driver's job: kcsi changed no ownership"
    );
    node.tear_down("pv-vmg", POD_UID).unwrap();
}

#[test]
fn fs_group_is_applied_by_kcsi_when_driver_lacks_volume_mount_group() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let node = Host::new(no_attach(json!({})));
    node.register_driver(&driver);
    let (handle, _) = staged_volume(&driver, &node, "pv-fsg");
    // A file the pod will see, owned by root:root 0600.
    let existing = driver.volume_path(&handle).join("old.txt");
    std::fs::write(&existing, "x").unwrap();
    std::fs::set_permissions(
        &existing,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    let m = node
        .mounter(&pv_spec("pv-fsg", &handle), &pod(POD_UID))
        .unwrap();
    m.set_up(Some(
        json!({"fsGroup": 3000, "fsGroupChangePolicy": "Always"}),
    ))
    .unwrap();
    assert!(mount_capability(&last_publish(&driver))
        .get("volume_mount_group")
        .is_none());
    let root = std::fs::metadata(m.path()).unwrap();
    assert_eq!(root.gid(), 3000);
    assert_eq!(
        root.mode() & 0o2070,
        0o2070,
        "setgid and g+rwx on the root dir"
    );
    let f = std::fs::metadata(m.path().join("old.txt")).unwrap();
    assert_eq!((f.gid(), f.mode() & 0o777), (3000, 0o660));

    // A read-only PV gets no ownership change (upstream supportsFSGroup).
    let (h2, _) = staged_volume(&driver, &node, "pv-ro");
    let mut ro = pv_spec("pv-ro", &h2);
    ro["readOnly"] = json!(true);
    let m2 = node.mounter(&ro, &pod(POD_UID)).unwrap();
    m2.set_up(Some(json!({"fsGroup": 3000}))).unwrap();
    assert_eq!(last_publish(&driver)["readonly"], true);
    assert_ne!(std::fs::metadata(m2.path()).unwrap().gid(), 3000);

    node.tear_down("pv-fsg", POD_UID).unwrap();
    node.tear_down("pv-ro", POD_UID).unwrap();
}

#[test]
fn fs_group_is_applied_to_a_read_write_once_pod_pv() {
    // Upstream hasReadWriteOnce (csi_util.go) accepts ReadWriteOncePod as RWO.
    let driver = DriverProcess::hostpath("node-1", &[]);
    let node = Host::new(no_attach(json!({})));
    node.register_driver(&driver);
    let (handle, _) = staged_volume(&driver, &node, "pv-rwop");
    let mut spec = pv_spec("pv-rwop", &handle);
    spec["persistentVolume"]["spec"]["accessModes"] = json!(["ReadWriteOncePod"]);
    let m = node.mounter(&spec, &pod(POD_UID)).unwrap();
    m.set_up(Some(json!({"fsGroup": 3000}))).unwrap();
    assert_eq!(
        last_publish(&driver)["volume_capability"]["access_mode"]["mode"],
        Mode::SingleNodeSingleWriter as i32
    );
    let root = std::fs::metadata(m.path()).unwrap();
    assert_eq!((root.gid(), root.mode() & 0o2070), (3000, 0o2070));
    node.tear_down("pv-rwop", POD_UID).unwrap();
}

#[test]
fn unknown_driver_is_transient_for_set_up_teardown_and_metrics() {
    let node = Host::new(json!({}));
    let m = node.mounter(&pv_spec("pv", "h"), &pod(POD_UID)).unwrap();
    let err = m.set_up(None).unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_NOT_FOUND, KCSI_CLASS_TRANSIENT)
    );
    assert_eq!(
        err.message,
        format!("kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name {DRIVER} not found in the list of registered CSI drivers")
    );
    assert!(!m.path().parent().unwrap().exists(), "nothing created");
    assert_eq!(m.metrics().unwrap_err().class, KCSI_CLASS_TRANSIENT);

    // An unmounter for a volume whose driver is gone.
    let dir = node
        .root()
        .join("pods/test-pod/volumes/kubernetes.io~csi/pv");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("vol_data.json"),
        format!("{{\"driverName\":\"{DRIVER}\",\"volumeHandle\":\"h\"}}\n"),
    )
    .unwrap();
    let err = node.tear_down("pv", POD_UID).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT);
    assert!(
        err.message
            .starts_with("kubernetes.io/csi: Unmounter.TearDownAt failed to get CSI client: "),
        "{}",
        err.message
    );
    assert!(dir.join("vol_data.json").exists());
}

#[test]
fn missing_volume_attachment_is_transient() {
    // No CSIDriver: attach is required, and a standalone host has no VolumeAttachment to read.
    let driver = DriverProcess::hostpath("node-1", &[]);
    let node = Host::new(json!({}));
    node.register_driver(&driver);
    let err = node
        .mounter(&pv_spec("pv", "h"), &pod(POD_UID))
        .unwrap()
        .set_up(None)
        .unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT);
    assert!(
        err.message
            .starts_with("kubernetes.io/csi: mounter.SetUpAt failed to fetch publishContext: "),
        "{}",
        err.message
    );
    assert!(driver.requests("NodePublishVolume").is_empty());
}

#[test]
fn deadline_exceeded_from_driver_is_uncertain_and_keeps_volume_data() {
    let v = Volume::new(
        DriverProcess::faulty_unstaged("node-1", &["--fail-rpc=NodePublishVolume=4"]),
        no_attach(json!({})),
        "pv-dl",
    );
    let err = v.m.set_up(None).unwrap_err();
    assert_eq!(
        (err.class, err.grpc),
        (KCSI_CLASS_UNCERTAIN, 4),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("rpc error: code = DeadlineExceeded"),
        "{}",
        err.message
    );
    assert_eq!(
        vol_data(&v.m.path())["volumeHandle"],
        v.handle.as_str(),
        "kept for a later teardown"
    );
}

#[test]
fn publish_outliving_the_host_timeout_is_uncertain() {
    let mut config = no_attach(json!({}));
    config["timeoutSeconds"] = json!(2);
    let v = Volume::new(
        DriverProcess::faulty_unstaged("node-1", &["--hang-rpc=NodePublishVolume"]),
        config,
        "pv-hang",
    );
    let err = v.m.set_up(None).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_UNCERTAIN, "{}", err.message);
    assert!(v.m.path().parent().unwrap().join("vol_data.json").exists());
}

#[test]
fn driver_killed_mid_publish_is_uncertain() {
    let mut v = Volume::new(
        DriverProcess::faulty_unstaged("node-1", &["--hang-rpc=NodePublishVolume"]),
        no_attach(json!({})),
        "pv-kill",
    );
    let err = std::thread::scope(|s| {
        let publishing = s.spawn(|| v.m.set_up(None));
        // The kill lands mid-publish: the driver is inside NodePublishVolume (its hook says so).
        common::wait_for(
            "NodePublishVolume to hang in the driver",
            Duration::from_secs(30),
            || {
                v.driver
                    .log()
                    .contains("test hook: NodePublishVolume hangs until its context ends")
            },
        );
        v.driver.kill();
        publishing.join().unwrap()
    })
    .unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_UNCERTAIN, "{}", err.message);
    // What the kubelet's event shows: grpc-go's words for a call whose driver went away (the
    // break, not the redial that found no driver), with no context of kcsi's.
    assert_eq!(
        err.upstream, "rpc error: code = Unavailable desc = error reading from server: EOF",
        "{}",
        err.message
    );
    assert!(
        v.m.path().parent().unwrap().join("vol_data.json").exists(),
        "kept for a later teardown"
    );
    // The lost connection and the redial that found no driver are both Unavailable, as
    // grpc-go reports them to upstream's `csi_operations_seconds`, never Unknown.
    let publish_codes: Vec<String> = v
        .node
        .metrics_text()
        .lines()
        .filter(|l| l.starts_with("csi_operations_seconds_count{"))
        .filter(|l| l.contains("method_name=\"/csi.v1.Node/NodePublishVolume\""))
        .map(String::from)
        .collect();
    assert_eq!(publish_codes.len(), 1, "{publish_codes:?}");
    assert!(
        publish_codes[0].contains("grpc_status_code=\"Unavailable\"")
            && publish_codes[0].ends_with(" 2"),
        "{publish_codes:?}"
    );
}

#[test]
fn restarted_driver_on_same_socket_serves_next_call() {
    let mut v = Volume::staged(
        DriverProcess::hostpath("node-1", &[]),
        no_attach(json!({})),
        "pv-restart",
    );
    v.m.set_up(None).unwrap();
    v.driver.restart();
    assert!(v.m.metrics().unwrap()["capacityBytes"].as_i64().unwrap() > 0);
    v.driver.restart();
    v.node.tear_down("pv-restart", POD_UID).unwrap();
    assert!(!v.m.path().parent().unwrap().exists());
}

#[test]
fn deregistered_driver_is_transient() {
    let v = Volume::staged(
        DriverProcess::hostpath("node-1", &[]),
        no_attach(json!({})),
        "pv-dereg",
    );
    v.m.set_up(None).unwrap();
    v.node.deregister(DRIVER);
    let err = v.node.tear_down("pv-dereg", POD_UID).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT);
    assert!(is_mount_point(&v.m.path()), "nothing changed");
    v.node.register_driver(&v.driver);
    v.node.tear_down("pv-dereg", POD_UID).unwrap();
}

#[test]
fn final_publish_error_removes_dir_and_volume_data() {
    let v = Volume::new(
        DriverProcess::faulty_unstaged("node-1", &["--fail-rpc=NodePublishVolume=9"]),
        no_attach(json!({})),
        "pv-fail",
    );
    let err = v.m.set_up(None).unwrap_err();
    assert_eq!(
        (err.result, err.class, err.grpc),
        (KCSI_ERR_DRIVER, KCSI_CLASS_FINAL, 9),
        "{}",
        err.message
    );
    assert!(
        !v.m.path().parent().unwrap().exists(),
        "dir and vol_data.json removed"
    );
}

#[test]
fn final_publish_error_keeps_dir_that_is_mount_point() {
    let v = Volume::new(
        DriverProcess::faulty_unstaged("node-1", &["--fail-rpc=NodePublishVolume=9"]),
        no_attach(json!({})),
        "pv-busy",
    );
    // Something (an earlier publish) is mounted at the target already.
    std::fs::create_dir_all(v.m.path()).unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(v.m.path())
        .status()
        .unwrap();
    assert!(status.success());
    let err = v.m.set_up(None).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_FINAL);
    assert!(is_mount_point(&v.m.path()));
    assert_eq!(
        vol_data(&v.m.path())["volumeHandle"],
        v.handle.as_str(),
        "kept: the target is mounted"
    );
}

#[test]
fn teardown_failure_is_final_and_keeps_dir_until_a_retry_succeeds() {
    let v = Volume::new(
        DriverProcess::faulty_unstaged("node-1", &["--fail-rpc=NodeUnpublishVolume=13:1"]),
        no_attach(json!({})),
        "pv-td",
    );
    v.m.set_up(None).unwrap();
    let err = v.node.tear_down("pv-td", POD_UID).unwrap_err();
    assert_eq!(
        (err.result, err.class, err.grpc),
        (KCSI_ERR_DRIVER, KCSI_CLASS_FINAL, 13)
    );
    assert!(
        err.message
            .starts_with("kubernetes.io/csi: Unmounter.TearDownAt failed: "),
        "{}",
        err.message
    );
    assert!(is_mount_point(&v.m.path()));
    assert!(v.m.path().parent().unwrap().join("vol_data.json").exists());
    v.node.tear_down("pv-td", POD_UID).unwrap();
    assert!(!v.m.path().parent().unwrap().exists());
}

#[test]
fn unmounter_needs_volume_data() {
    let node = Host::new(json!({}));
    let err = node.unmounter("pv", POD_UID).err().unwrap();
    let mount = node
        .root()
        .join("pods/test-pod/volumes/kubernetes.io~csi/pv/mount");
    assert_eq!(err.result, KCSI_ERR_NOT_FOUND);
    assert!(
        err.message.starts_with(&format!(
            "kubernetes.io/csi: unmounter failed to load volume data file [{}]: ",
            mount.display()
        )),
        "{}",
        err.message
    );
    std::fs::create_dir_all(mount.parent().unwrap()).unwrap();
    std::fs::write(mount.parent().unwrap().join("vol_data.json"), "").unwrap();
    let err = node.unmounter("pv", POD_UID).err().unwrap();
    assert_eq!(err.result, KCSI_ERR_IO);
    assert!(
        err.message.contains("vol_data.json") && err.message.ends_with("EOF"),
        "{}",
        err.message
    );
}

#[test]
fn metrics_need_get_volume_stats_and_report_condition_with_csi_volume_health() {
    let v = Volume::staged(
        DriverProcess::hostpath("node-1", &[]),
        json!({
            "featureGates": {"CSIVolumeHealth": true},
            "csiDrivers": [csi_driver(json!({"attachRequired": false}))]
        }),
        "pv-m",
    );
    v.m.set_up(None).unwrap();
    let metrics = v.m.metrics().unwrap();
    // The driver's own verdict, passed through: hostpathplugin (pkg/hostpath/healthcheck.go
    // checkMountPointExist) looks for its volume under /var/lib/kubelet/pods only, so a host
    // rooted elsewhere gets "not mounted".
    assert_eq!(
        (&metrics["abnormal"], &metrics["message"]),
        (&json!(true), &json!("The volume isn't mounted"))
    );
    v.node.tear_down("pv-m", POD_UID).unwrap();

    let no_stats = DriverProcess::faulty_unstaged(
        "node-1",
        &["--disable-node-cap=STAGE_UNSTAGE_VOLUME,GET_VOLUME_STATS"],
    );
    let node2 = Host::new(no_attach(json!({})));
    node2.register_driver(&no_stats);
    let m = node2
        .mounter(&pv_spec("pv-m", "any"), &pod(POD_UID))
        .unwrap();
    let err = m.metrics().unwrap_err();
    assert_eq!(err.result, KCSI_ERR_NOT_SUPPORTED);
    assert_eq!(
        err.message,
        format!("metrics are not supported for {DRIVER} volumes")
    );
}

#[test]
fn reconstruction_and_teardown_work_from_a_fresh_host() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let config = json!({
        "featureGates": {"SELinuxMountReadWriteOncePod": true},
        "csiDrivers": [csi_driver(json!({
            "attachRequired": false, "seLinuxMount": true, "podInfoOnMount": true,
            "volumeLifecycleModes": ["Persistent", "Ephemeral"]
        }))]
    });
    let mut first = Host::new(config.clone());
    first.register_driver(&driver);
    let (handle, staging) = staged_volume(&driver, &first, "pv-r");
    let pv = first
        .mounter(&pv_spec("pv-r", &handle), &pod(POD_UID))
        .unwrap();
    pv.set_up(Some(json!({"seLinuxLabel": "s0,c1"}))).unwrap();
    let inline = first.mounter(&inline_spec("eph"), &pod(POD_UID)).unwrap();
    inline.set_up(None).unwrap();
    let (pv_path, inline_path) = (pv.path(), inline.path());

    // The kubelet restarts: the old host goes, its handles fail cleanly.
    first.free();
    let err = pv.metrics().unwrap_err();
    assert_eq!(err.result, KCSI_ERR_FAILED_PRECONDITION);
    drop((pv, inline));
    let second = Host::on_root(first.root(), config);
    second.register_driver(&driver);

    let rebuilt = second.construct(pv_path.parent().unwrap()).unwrap();
    assert_eq!(
        rebuilt,
        json!({"spec": {"persistentVolume": {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "pv-r"},
            "spec": {"csi": {"driver": DRIVER, "volumeHandle": handle}, "volumeMode": "Filesystem"}
        }, "readOnly": false}, "seLinuxMountContext": "s0,c1"})
    );
    let rebuilt_inline = second.construct(inline_path.parent().unwrap()).unwrap();
    assert_eq!(
        rebuilt_inline,
        json!({"spec": {"volume": {"name": "eph", "csi": {"driver": DRIVER}}}, "seLinuxMountContext": ""})
    );

    // The rebuilt spec is one kcsi takes.
    let (spec, mut out) = (cstr(&rebuilt["spec"].to_string()), ptr::null_mut());
    call(|e| kcsi::ffi::queries::kcsi_get_volume_name(second.ptr, spec.as_ptr(), &mut out, e))
        .unwrap();
    assert_eq!(take_string(out), format!("{DRIVER}^{handle}"));

    second.tear_down("pv-r", POD_UID).unwrap();
    second.tear_down("eph", POD_UID).unwrap();
    assert!(!is_mount_point(&pv_path) && !is_mount_point(&inline_path));
    assert!(!pv_path.parent().unwrap().exists() && !inline_path.parent().unwrap().exists());
    driver.unstage(&handle, &staging);
}

#[test]
fn failed_volume_data_save_is_final_removes_the_mount_dir_and_publishes_nothing() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let node = Host::new(no_attach(json!({})));
    node.register_driver(&driver);
    let m = node
        .mounter(&pv_spec("pv-save", "h"), &pod(POD_UID))
        .unwrap();
    // A directory where the file belongs: the rename onto it fails.
    std::fs::create_dir_all(m.path().parent().unwrap().join("vol_data.json")).unwrap();
    let err = m.set_up(None).unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_IO, KCSI_CLASS_FINAL),
        "{}",
        err.message
    );
    assert!(
        err.message
            .starts_with("kubernetes.io/csi: mounter.SetUpAt failed to save volume info data: "),
        "{}",
        err.message
    );
    assert!(driver.requests("NodePublishVolume").is_empty());
    assert!(
        !m.path().exists(),
        "upstream removes the mount dir after a failed save"
    );
}

#[test]
fn many_volumes_set_up_and_tear_down_concurrently_through_one_host() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let node = Host::new(no_attach(json!({})));
    node.register_driver(&driver);
    let handles: Vec<String> = (0..8)
        .map(|i| staged_volume(&driver, &node, &format!("pv-c{i}")).0)
        .collect();
    std::thread::scope(|s| {
        for (i, handle) in handles.iter().enumerate() {
            let node = &node;
            s.spawn(move || {
                let (name, uid) = (format!("pv-c{i}"), format!("pod-{}", i % 3));
                let m = node.mounter(&pv_spec(&name, handle), &pod(&uid)).unwrap();
                m.set_up(None).unwrap();
                assert!(is_mount_point(&m.path()));
                m.metrics().unwrap();
                node.tear_down(&name, &uid).unwrap();
                assert!(!m.path().parent().unwrap().exists());
            });
        }
    });
    assert_eq!(driver.requests("NodeUnpublishVolume").len(), 8);
}
