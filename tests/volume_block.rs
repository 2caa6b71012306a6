//! Block volumes through the C API against the real csi-driver-host-path, which attaches a
//! loop device at CreateVolume and bind-mounts it onto the publish file: SetUpDevice → MapPodDevice → I/O through
//! the device file → UnmapPodDevice → TearDownDevice, and the error paths (faults and a driver without staging from csi-fault-driver).

use kcsi_testkit as common;

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use common::capi::*;
use common::*;
use kcsi::ffi::*;
use serde_json::{json, Value};

const MIB: i64 = 1 << 20;
const POD_UID: &str = "pod-uid-1";

fn block_spec(name: &str, handle: &str) -> Value {
    pv_spec(name, handle, true, json!({}), json!({}))
}

fn data_file(root: &Path, spec: &str) -> std::path::PathBuf {
    root.join(format!(
        "plugins/kubernetes.io/csi/volumeDevices/{spec}/data/vol_data.json"
    ))
}

#[test]
fn block_mapper_paths_follow_upstream_layout_and_vol_data_is_written() {
    let host = Host::new(json!({}));
    let m = host
        .mapper(&block_spec("test.spec.1", "vol-123"), &pod("p", POD_UID))
        .unwrap();
    let r = host.root().display();
    let base = format!("{r}/plugins/kubernetes.io/csi/volumeDevices");
    let paths = m.paths();
    assert_eq!(paths["globalMapPath"], format!("{base}/test.spec.1/dev"));
    assert_eq!(paths["stagingPath"], format!("{base}/staging/test.spec.1"));
    assert_eq!(
        paths["publishPath"],
        format!("{base}/publish/test.spec.1/{POD_UID}")
    );
    assert_eq!(
        paths["podDeviceMapPath"],
        format!("{r}/pods/{POD_UID}/volumeDevices/kubernetes.io~csi")
    );
    assert_eq!(paths["podDeviceMapName"], "test.spec.1");
    assert_eq!(paths["volumeDataDir"], format!("{base}/test.spec.1/data"));
    let attachment = kcsi::attachment_name("vol-123", DRIVER, "node-1");
    assert_eq!(
        std::fs::read_to_string(data_file(host.root(), "test.spec.1")).unwrap(),
        format!(
            "{{\"attachmentID\":\"{attachment}\",\"driverName\":\"{DRIVER}\",\"nodeName\":\"node-1\",\"specVolID\":\"test.spec.1\",\"volumeHandle\":\"vol-123\"}}\n"
        )
    );
    let inline = json!({"volume": {"name": "v", "csi": {"driver": DRIVER}}});
    assert_eq!(
        host.mapper(&inline, &pod("p", POD_UID)).unwrap_err().result,
        KCSI_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        host.mapper(&block_spec("s", "h"), &pod("p", "../x"))
            .unwrap_err()
            .result,
        KCSI_ERR_INVALID_ARGUMENT
    );
}

#[test]
fn block_volume_round_trip_writes_through_the_published_device_file() {
    let f = Fixture::new(no_attach(json!({})));
    let handle = f.driver.create_volume("pv-block", true, 4 * MIB);
    let backing = f.driver.volume_path(&handle);
    let spec = block_spec("pv-block", &handle);
    let m = f.host.mapper(&spec, &pod("p", POD_UID)).unwrap();
    let paths = m.paths();

    let staging = m.set_up_device().unwrap();
    assert_eq!(staging, paths["stagingPath"].as_str().unwrap());
    assert!(Path::new(&staging).is_dir());
    let stage = &f.driver.calls("NodeStageVolume")[0]["Request"];
    assert_eq!(stage["staging_target_path"], staging.as_str());
    assert!(block_capability(stage).is_object(), "{stage}");

    let publish = m.map_pod_device().unwrap();
    assert_eq!(publish, paths["publishPath"].as_str().unwrap());
    let req = &f.driver.calls("NodePublishVolume")[0]["Request"];
    assert_eq!(req["target_path"], publish.as_str());
    assert_eq!(req["staging_target_path"], staging.as_str());
    assert!(
        req.get("volume_context").is_none(),
        "no pod info without podInfoOnMount: {req}"
    );
    assert_eq!(
        loop_devices(&backing).len(),
        1,
        "the driver attached a loop device (at CreateVolume)"
    );

    let payload = b"kcsi block volume round trip";
    let offset = 2 * MIB as u64 + 512;
    {
        let mut dev = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&publish)
            .unwrap();
        dev.seek(SeekFrom::Start(offset)).unwrap();
        dev.write_all(payload).unwrap();
        dev.sync_all().unwrap();
        let mut back = vec![0; payload.len()];
        dev.seek(SeekFrom::Start(offset)).unwrap();
        dev.read_exact(&mut back).unwrap();
        assert_eq!(back, payload);
    }
    let on_disk = std::fs::read(&backing).unwrap();
    assert_eq!(
        &on_disk[offset as usize..offset as usize + payload.len()],
        payload,
        "bytes reached the driver's backing file"
    );

    // A restarted host finds the volume from disk alone.
    let fresh = Host::on_root(f.root(), no_attach(json!({})));
    fresh.register(DRIVER, &f.driver.endpoint());
    let rebuilt = fresh
        .construct_block_spec(POD_UID, "pv-block", "/unused/map/path")
        .unwrap();
    assert_eq!(rebuilt["persistentVolume"]["metadata"]["name"], "pv-block");
    assert_eq!(rebuilt["persistentVolume"]["spec"]["volumeMode"], "Block");
    assert_eq!(
        rebuilt["persistentVolume"]["spec"]["csi"]["volumeHandle"],
        handle.as_str()
    );
    assert_eq!(rebuilt["persistentVolume"]["spec"]["csi"]["driver"], DRIVER);

    fresh
        .unmapper("pv-block", POD_UID)
        .unwrap()
        .unmap_pod_device()
        .unwrap();
    assert!(
        !Path::new(&publish).exists(),
        "driver removed the device file"
    );
    let global = paths["globalMapPath"].as_str().unwrap();
    fresh
        .unmapper("pv-block", "")
        .unwrap()
        .tear_down_device(global)
        .unwrap();
    assert_eq!(
        f.driver.calls("NodeUnstageVolume")[0]["Request"]["staging_target_path"],
        staging.as_str()
    );
    let devices = f.root().join("plugins/kubernetes.io/csi/volumeDevices");
    for gone in ["pv-block", "staging/pv-block", "publish/pv-block"] {
        assert!(!devices.join(gone).exists(), "{gone} removed");
    }
    assert!(mounts_below(f.root()).is_empty());
    // hostpathplugin keeps the loop device until DeleteVolume; the fixture detaches it.
    assert_eq!(
        loop_devices(&backing).len(),
        1,
        "kcsi leaves the driver's device alone"
    );
}

#[test]
fn set_up_device_final_error_removes_data_dev_and_staging() {
    let f = Fixture::faulty(&["--fail-rpc=NodeStageVolume=3"], no_attach(json!({})));
    let handle = f.driver.create_volume("pv-fail", true, MIB);
    let m = f
        .host
        .mapper(&block_spec("pv-fail", &handle), &pod("p", POD_UID))
        .unwrap();
    std::fs::create_dir_all(m.paths()["globalMapPath"].as_str().unwrap()).unwrap();
    let err = m.set_up_device().unwrap_err();
    assert_eq!(
        (err.result, err.class, err.grpc),
        (KCSI_ERR_DRIVER, KCSI_CLASS_FINAL, 3),
        "{err:?}"
    );
    let devices = f.root().join("plugins/kubernetes.io/csi/volumeDevices");
    for gone in ["pv-fail/data", "pv-fail/dev", "pv-fail", "staging/pv-fail"] {
        assert!(!devices.join(gone).exists(), "{gone} removed");
    }
}

#[test]
fn capability_probe_unavailable_is_uncertain_for_map_pod_device_and_final_for_set_up_device() {
    // Upstream: MapPodDevice's probe is inside NodePublishVolume (getNodeV1AccessModeMapper,
    // uncertain on a non-final code); stageVolumeForBlock wraps its probe error in a plain one.
    let f = Fixture::faulty(&["--fail-rpc=NodeGetCapabilities=14"], no_attach(json!({})));
    let handle = f.driver.create_volume("pv-caps", true, MIB);
    let m = f
        .host
        .mapper(&block_spec("pv-caps", &handle), &pod("p", POD_UID))
        .unwrap();
    let err = m.set_up_device().unwrap_err();
    assert_eq!((err.grpc, err.class), (14, KCSI_CLASS_FINAL), "{err:?}");
    assert!(
        err.message.contains(
            "blockMapper.stageVolumeForBlock failed to check STAGE_UNSTAGE_VOLUME capability"
        ),
        "{}",
        err.message
    );
    let err = m.map_pod_device().unwrap_err();
    assert_eq!((err.grpc, err.class), (14, KCSI_CLASS_UNCERTAIN), "{err:?}");
    assert!(f.driver.calls("NodePublishVolume").is_empty());
}

#[test]
fn set_up_device_stage_timeout_is_uncertain_and_keeps_files() {
    let mut config = no_attach(json!({}));
    config["timeoutSeconds"] = json!(1);
    let f = Fixture::faulty(&["--hang-rpc=NodeStageVolume"], config);
    let handle = f.driver.create_volume("pv-hang", true, MIB);
    let m = f
        .host
        .mapper(&block_spec("pv-hang", &handle), &pod("p", POD_UID))
        .unwrap();
    let err = m.set_up_device().unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_UNCERTAIN, "{err:?}");
    assert!(data_file(f.root(), "pv-hang").exists());
}

#[test]
fn set_up_device_without_stage_capability_returns_no_staging_path() {
    let f = Fixture::faulty(
        &["--disable-node-cap=STAGE_UNSTAGE_VOLUME"],
        no_attach(json!({})),
    );
    let handle = f.driver.create_volume("pv-nostage", true, MIB);
    let m = f
        .host
        .mapper(&block_spec("pv-nostage", &handle), &pod("p", POD_UID))
        .unwrap();
    assert_eq!(m.set_up_device().unwrap(), "");
    assert!(f.driver.calls("NodeStageVolume").is_empty());
    let publish = m.map_pod_device().unwrap();
    assert!(Path::new(&publish).exists());
    let u = f.host.unmapper("pv-nostage", POD_UID).unwrap();
    u.unmap_pod_device().unwrap();
    u.tear_down_device("").unwrap();
    assert!(f.driver.calls("NodeUnstageVolume").is_empty());
    assert!(!f
        .root()
        .join("plugins/kubernetes.io/csi/volumeDevices/pv-nostage")
        .exists());
}

#[test]
fn map_pod_device_sends_pod_info_when_the_csidriver_asks_for_it() {
    let config = json!({"csiDrivers": [{"metadata": {"name": DRIVER}, "spec": {"attachRequired": false, "podInfoOnMount": true}}]});
    let f = Fixture::new(config);
    let handle = f.driver.create_volume("pv-info", true, MIB);
    let m = f
        .host
        .mapper(&block_spec("pv-info", &handle), &pod("test-pod", POD_UID))
        .unwrap();
    m.set_up_device().unwrap();
    m.map_pod_device().unwrap();
    let ctx = &f.driver.calls("NodePublishVolume")[0]["Request"]["volume_context"];
    assert_eq!(
        ctx,
        &json!({
            "csi.storage.k8s.io/pod.name": "test-pod",
            "csi.storage.k8s.io/pod.namespace": "test-ns",
            "csi.storage.k8s.io/pod.uid": POD_UID,
            "csi.storage.k8s.io/serviceAccount.name": "test-sa",
            "csi.storage.k8s.io/ephemeral": "false",
        })
    );
    let u = f.host.unmapper("pv-info", POD_UID).unwrap();
    u.unmap_pod_device().unwrap();
    u.tear_down_device("").unwrap();
}

#[test]
fn block_operations_for_an_unregistered_driver_are_transient() {
    let host = Host::new(no_attach(json!({})));
    let m = host
        .mapper(&block_spec("pv-x", "vol-x"), &pod("p", POD_UID))
        .unwrap();
    let u = host.unmapper("pv-x", POD_UID).unwrap();
    let errors = [
        m.set_up_device().unwrap_err(),
        m.map_pod_device().unwrap_err(),
        u.unmap_pod_device().unwrap_err(),
        u.tear_down_device("").unwrap_err(),
    ];
    for err in errors {
        assert_eq!(
            (err.result, err.class),
            (KCSI_ERR_NOT_FOUND, KCSI_CLASS_TRANSIENT),
            "{err:?}"
        );
    }
    assert!(data_file(host.root(), "pv-x").exists(), "nothing removed");
}

#[test]
fn block_unmapper_without_vol_data_is_not_found() {
    let host = Host::new(json!({}));
    let err = host.unmapper("missing", POD_UID).unwrap_err();
    assert_eq!(err.result, KCSI_ERR_NOT_FOUND, "{err:?}");
    assert!(
        err.message
            .contains("unmapper failed to load volume data file"),
        "{}",
        err.message
    );
    let err = host
        .construct_block_spec(POD_UID, "missing", "/x")
        .unwrap_err();
    assert_eq!(err.result, KCSI_ERR_NOT_FOUND, "{err:?}");
}

#[test]
fn tear_down_device_never_removes_a_mounted_device_file() {
    let f = Fixture::new(no_attach(json!({})));
    let handle = f.driver.create_volume("pv-busy", true, MIB);
    let (host, root) = (&f.host, f.root());
    let m = host
        .mapper(&block_spec("pv-busy", &handle), &pod("p", POD_UID))
        .unwrap();
    // What the kubelet's MapBlockVolume leaves: a file in the global map path with a bind mount.
    let global = m.paths()["globalMapPath"].as_str().unwrap().to_string();
    std::fs::create_dir_all(&global).unwrap();
    let file = Path::new(&global).join(POD_UID);
    std::fs::write(&file, b"").unwrap();
    let src = root.join("src");
    std::fs::write(&src, b"x").unwrap();
    assert!(std::process::Command::new("mount")
        .arg("--bind")
        .arg(&src)
        .arg(&file)
        .status()
        .unwrap()
        .success());
    let teardown = host
        .unmapper("pv-busy", "")
        .unwrap()
        .tear_down_device(&global);
    let still_there = file.exists() && mounts_below(root).len() == 1;
    common::unmount_below(root);
    teardown.unwrap();
    assert!(still_there, "mounted device file left alone");
}
