//! The device-mount half of the kubelet's sequence (WaitForAttach → MountDevice → … →
//! UnmountDevice) through the C API, against the real csi-driver-host-path (csi-fault-driver
//! where a test injects a fault or needs a driver without staging, the e2e mock driver where
//! it needs VOLUME_MOUNT_GROUP).

use kcsi_testkit as common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::capi::*;
use common::*;
use kcsi::ffi::reconstruct::kcsi_construct_block_volume_spec;
use kcsi::ffi::*;
use serde_json::{json, Value};

const GIB: i64 = 1 << 30;

fn fs_spec(handle: &str) -> Value {
    pv_spec(
        "test-pv",
        handle,
        false,
        json!({"fsType": "ext4"}),
        json!({"mountOptions": ["test-op"]}),
    )
}

fn vol_data(dmp: &str) -> String {
    std::fs::read_to_string(Path::new(dmp).parent().unwrap().join("vol_data.json")).unwrap()
}

#[test]
fn device_mount_path_is_driver_dir_sha256_of_handle_globalmount() {
    let host = Host::new(json!({}));
    let a = host.attacher();
    let path = a.device_mount_path(&fs_spec("vol-123")).unwrap();
    assert_eq!(
        path,
        format!(
            "{}/plugins/kubernetes.io/csi/{DRIVER}/089d5e4b1e716868b2a08620dae565670ad7fb1eec5205d9a79c39e85fdfc01d/globalmount",
            host.root().display()
        )
    );
    let inline = json!({"volume": {"name": "v", "csi": {"driver": DRIVER}}});
    assert_eq!(
        a.device_mount_path(&inline).unwrap_err().result,
        KCSI_ERR_INVALID_ARGUMENT
    );
    let empty = a.device_mount_path(&fs_spec("")).unwrap_err();
    assert!(
        empty.message.contains("volume handle is empty"),
        "{}",
        empty.message
    );
}

#[test]
fn mount_device_stages_at_globalmount_and_unmount_device_unstages() {
    let f = Fixture::new(no_attach(json!({})));
    let handle = f.driver.create_volume("pv-stage", false, GIB);
    let spec = fs_spec(&handle);
    let a = f.host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();

    a.mount_device(&spec, &dmp, None).unwrap();
    assert!(Path::new(&dmp).is_dir());
    assert_eq!(
        std::fs::metadata(&dmp).unwrap().permissions().mode() & 0o777,
        0o750
    );
    assert_eq!(
        vol_data(&dmp),
        format!("{{\"driverName\":\"{DRIVER}\",\"volumeHandle\":\"{handle}\"}}\n")
    );
    let stages = f.driver.calls("NodeStageVolume");
    assert_eq!(stages.len(), 1);
    let req = &stages[0]["Request"];
    assert_eq!(req["staging_target_path"], dmp.as_str());
    assert_eq!(req["volume_id"], handle.as_str());
    assert_eq!(stages[0]["Error"], "");
    let cap = req["volume_capability"].to_string();
    assert!(
        cap.contains("test-op") && cap.contains("ext4"),
        "mount flags and fsType: {cap}"
    );
    // Staging is idempotent: a second MountDevice succeeds.
    a.mount_device(&spec, &dmp, None).unwrap();

    a.unmount_device(&dmp).unwrap();
    let unstages = f.driver.calls("NodeUnstageVolume");
    assert_eq!(unstages.len(), 1);
    assert_eq!(unstages[0]["Request"]["staging_target_path"], dmp.as_str());
    assert_eq!(unstages[0]["Error"], "");
    assert!(
        !Path::new(&dmp).parent().unwrap().exists(),
        "sha dir removed"
    );
    assert!(mounts_below(f.root()).is_empty());
}

#[test]
fn mount_device_without_stage_capability_only_records_vol_data() {
    let f = Fixture::faulty(
        &["--disable-node-cap=STAGE_UNSTAGE_VOLUME"],
        no_attach(json!({})),
    );
    let handle = f.driver.create_volume("pv-nostage", false, GIB);
    let spec = fs_spec(&handle);
    let a = f.host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();
    a.mount_device(&spec, &dmp, None).unwrap();
    assert!(vol_data(&dmp).contains(&handle));
    assert!(f.driver.calls("NodeStageVolume").is_empty());
    a.unmount_device(&dmp).unwrap();
    assert!(f.driver.calls("NodeUnstageVolume").is_empty());
    assert!(!Path::new(&dmp).parent().unwrap().exists());
}

#[test]
fn mount_device_for_unregistered_driver_is_transient() {
    let host = Host::new(no_attach(json!({})));
    let a = host.attacher();
    let spec = fs_spec("vol-123");
    let dmp = a.device_mount_path(&spec).unwrap();
    let err = a.mount_device(&spec, &dmp, None).unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_NOT_FOUND, KCSI_CLASS_TRANSIENT),
        "{err:?}"
    );
    assert!(
        err.message
            .contains("not found in the list of registered CSI drivers"),
        "{}",
        err.message
    );
    assert!(!Path::new(&dmp).exists(), "nothing created");
}

#[test]
fn mount_device_stage_timeout_is_uncertain_and_keeps_vol_data() {
    let mut config = no_attach(json!({}));
    config["timeoutSeconds"] = json!(1);
    let f = Fixture::faulty(&["--hang-rpc=NodeStageVolume"], config);
    let handle = f.driver.create_volume("pv-hang", false, GIB);
    let spec = fs_spec(&handle);
    let a = f.host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();
    let err = a.mount_device(&spec, &dmp, None).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_UNCERTAIN, "{err:?}");
    assert_eq!(err.result, KCSI_ERR_TIMEOUT, "{err:?}");
    // The driver may still stage: UnmountDevice needs the file later.
    assert!(vol_data(&dmp).contains(&handle));
}

#[test]
fn mount_device_capability_probe_unavailable_or_deadline_is_uncertain() {
    // v1.36.3 csi_client.go nodeGetCapabilities: a non-final code is uncertain, and
    // MountDevice returns NodeSupportsStageUnstage's error as is. A final code stays final.
    for (code, class) in [
        (14, KCSI_CLASS_UNCERTAIN),
        (4, KCSI_CLASS_UNCERTAIN),
        (13, KCSI_CLASS_FINAL),
    ] {
        let f = Fixture::faulty(
            &[&format!("--fail-rpc=NodeGetCapabilities={code}")],
            no_attach(json!({})),
        );
        let handle = f.driver.create_volume("pv-caps", false, GIB);
        let spec = fs_spec(&handle);
        let a = f.host.attacher();
        let dmp = a.device_mount_path(&spec).unwrap();
        let err = a.mount_device(&spec, &dmp, None).unwrap_err();
        assert_eq!((err.grpc, err.class), (code, class), "code {code}: {err:?}");
        assert!(f.driver.calls("NodeStageVolume").is_empty());
    }
}

#[test]
fn mount_device_final_stage_error_removes_globalmount_and_vol_data() {
    let f = Fixture::faulty(&["--fail-rpc=NodeStageVolume=9"], no_attach(json!({})));
    let handle = f.driver.create_volume("pv-fail", false, GIB);
    let spec = fs_spec(&handle);
    let a = f.host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();
    let err = a.mount_device(&spec, &dmp, None).unwrap_err();
    assert_eq!(
        (err.result, err.class, err.grpc),
        (KCSI_ERR_DRIVER, KCSI_CLASS_FINAL, 9),
        "{err:?}"
    );
    assert!(
        err.message.contains("rpc error: code = FailedPrecondition"),
        "{}",
        err.message
    );
    assert!(
        !Path::new(&dmp).parent().unwrap().exists(),
        "globalmount, vol_data.json and sha dir removed"
    );
}

#[test]
fn mount_device_sends_fs_group_as_volume_mount_group_only_with_the_capability() {
    let args = json!({"fsGroup": 3000});
    // The e2e mock driver has VOLUME_MOUNT_GROUP (--volume-mount-group); hostpath has not.
    let with_cap = DriverProcess::mock(DRIVER, &["--disable-attach", "--volume-mount-group"]);
    for (driver, expected) in [
        (with_cap, true),
        (DriverProcess::hostpath("node-1", &[]), false),
    ] {
        let f = Fixture::with(driver, no_attach(json!({})));
        let handle = f.driver.create_volume("pv-vmg", false, GIB);
        let spec = fs_spec(&handle);
        let a = f.host.attacher();
        let dmp = a.device_mount_path(&spec).unwrap();
        a.mount_device(&spec, &dmp, Some(&args)).unwrap();
        let stage = f.driver.last_request("NodeStageVolume");
        assert_eq!(
            mount_capability(&stage)["volume_mount_group"] == "3000",
            expected,
            "{stage}"
        );
        a.unmount_device(&dmp).unwrap();
    }
}

#[test]
fn mount_device_appends_selinux_context_when_gate_and_driver_allow_it() {
    let config = json!({
        "featureGates": {"SELinuxMountReadWriteOncePod": true},
        "csiDrivers": [{"metadata": {"name": DRIVER}, "spec": {"attachRequired": false, "seLinuxMount": true}}],
    });
    let f = Fixture::new(config);
    let handle = f.driver.create_volume("pv-selinux", false, GIB);
    let spec = fs_spec(&handle);
    let a = f.host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();
    a.mount_device(&spec, &dmp, Some(&json!({"seLinuxLabel": "s0,c0"})))
        .unwrap();
    let cap = f.driver.calls("NodeStageVolume")[0]["Request"]["volume_capability"].to_string();
    assert!(cap.contains(r#"["test-op","context=\"s0,c0\""]"#), "{cap}");
    assert!(
        vol_data(&dmp).contains(r#""seLinuxMountContext":"s0,c0""#),
        "{}",
        vol_data(&dmp)
    );
    a.unmount_device(&dmp).unwrap();
}

#[test]
fn unmount_device_without_vol_data_is_a_no_op() {
    let f = Fixture::new(no_attach(json!({})));
    let a = f.host.attacher();
    let dmp = a.device_mount_path(&fs_spec("gone")).unwrap();
    a.unmount_device(&dmp).unwrap();
    assert!(f.driver.calls("NodeUnstageVolume").is_empty());
}

#[test]
fn unmount_device_with_corrupt_vol_data_fails() {
    let f = Fixture::new(no_attach(json!({})));
    let a = f.host.attacher();
    let dmp = a.device_mount_path(&fs_spec("corrupt")).unwrap();
    std::fs::create_dir_all(&dmp).unwrap();
    std::fs::write(
        Path::new(&dmp).parent().unwrap().join("vol_data.json"),
        "{not json",
    )
    .unwrap();
    let err = a.unmount_device(&dmp).unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_IO, KCSI_CLASS_FINAL),
        "{err:?}"
    );
    assert!(
        err.message.contains("failed to parse volume data file"),
        "{}",
        err.message
    );
    assert!(Path::new(&dmp).exists(), "nothing removed");
}

#[test]
fn unmount_device_for_unregistered_driver_is_transient() {
    let host = Host::new(json!({}));
    let a = host.attacher();
    let dmp = a.device_mount_path(&fs_spec("vol-123")).unwrap();
    std::fs::create_dir_all(&dmp).unwrap();
    let data = format!("{{\"driverName\":\"{DRIVER}\",\"volumeHandle\":\"vol-123\"}}\n");
    std::fs::write(
        Path::new(&dmp).parent().unwrap().join("vol_data.json"),
        data,
    )
    .unwrap();
    let err = a.unmount_device(&dmp).unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_NOT_FOUND, KCSI_CLASS_TRANSIENT),
        "{err:?}"
    );
    assert!(Path::new(&dmp).exists(), "nothing removed");
}

#[test]
fn device_mount_paths_outside_the_plugin_dir_are_refused() {
    let f = Fixture::new(no_attach(json!({})));
    let a = f.host.attacher();
    let spec = fs_spec("vol-123");
    let plugins = f.root().join("plugins/kubernetes.io/csi");
    for bad in [
        String::new(),
        "relative/globalmount".to_string(),
        "/tmp/elsewhere/globalmount".to_string(),
        format!("{}/../../x/globalmount", plugins.display()),
        format!("{}/globalmount", plugins.display()),
    ] {
        let err = a.mount_device(&spec, &bad, None).unwrap_err();
        assert_eq!(err.result, KCSI_ERR_INVALID_ARGUMENT, "{bad}: {err:?}");
        assert_eq!(
            a.unmount_device(&bad).unwrap_err().result,
            KCSI_ERR_INVALID_ARGUMENT,
            "{bad}"
        );
    }
}

#[test]
fn wait_for_attach_without_api_server_fails_naming_the_attachment_and_the_fix() {
    let host = Host::new(no_attach(json!({})));
    let a = host.attacher();
    let err = a
        .wait_for_attach(
            &pv_spec("test-pv", "vol-123", false, json!({}), json!({})),
            0,
        )
        .unwrap_err();
    let attachment = kcsi::attachment_name("vol-123", DRIVER, "node-1");
    assert!(
        err.message.starts_with(&format!(
            "volume vol-123 has GET error for volume attachment {attachment}"
        )),
        "{}",
        err.message
    );
    // As the mounter's publishContext error does: how to fix it.
    assert!(
        err.message.ends_with(&format!(
            "; if CSI driver {DRIVER} needs no attach, add {{\"metadata\": {{\"name\": \"{DRIVER}\"}}, \"spec\": {{\"attachRequired\": false}}}} to the host config's \"csiDrivers\", otherwise give the host a \"kubeconfig\""
        )),
        "{}",
        err.message
    );
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_NOT_SUPPORTED, KCSI_CLASS_TRANSIENT),
        "{err:?}"
    );
}

#[test]
fn attacher_of_a_freed_host_fails_with_failed_precondition() {
    let host = Host::new(json!({}));
    let a = host.attacher();
    drop(host);
    let err = a.device_mount_path(&fs_spec("vol-123")).unwrap_err();
    assert_eq!(err.result, KCSI_ERR_FAILED_PRECONDITION);
}

#[test]
fn filesystem_sequence_mount_device_set_up_tear_down_unmount_device_leaves_nothing() {
    let f = Fixture::new(no_attach(json!({})));
    let handle = f.driver.create_volume("pv-seq", false, GIB);
    let spec = fs_spec(&handle);
    let a = f.host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();
    a.mount_device(&spec, &dmp, None).unwrap();

    let m = f.host.mounter(&spec, &pod("web", "uid-seq")).unwrap();
    m.set_up(None).unwrap();
    let path = m.path();
    assert_eq!(
        f.driver.calls("NodePublishVolume")[0]["Request"]["staging_target_path"],
        dmp.as_str()
    );
    std::fs::write(path.join("hello"), b"through the bind mount").unwrap();
    assert_eq!(
        std::fs::read(f.driver.volume_path(&handle).join("hello")).unwrap(),
        b"through the bind mount"
    );

    f.host.tear_down("test-pv", "uid-seq").unwrap();
    a.unmount_device(&dmp).unwrap();
    assert!(mounts_below(f.root()).is_empty());
    assert!(!Path::new(&dmp).parent().unwrap().exists());
    assert!(!path.parent().unwrap().exists());
}

#[test]
fn null_and_malformed_arguments_are_invalid_never_a_crash() {
    use kcsi::ffi::attacher::*;
    use kcsi::ffi::block::*;
    use kcsi::ffi::expand::kcsi_node_expand;
    use std::ptr::{null, null_mut};
    let host = Host::new(json!({}));
    let a = host.attacher();
    let spec = cstr(&fs_spec("vol-123").to_string());
    let bad = cstr("{not json");
    let mut s = null_mut();
    let mut resized = false;
    let rcs = [
        kcsi_attacher_new(null_mut(), &mut null_mut(), null_mut()),
        kcsi_attacher_new(host.ptr, null_mut(), null_mut()),
        kcsi_attacher_device_mount_path(null_mut(), spec.as_ptr(), &mut s, null_mut()),
        kcsi_attacher_device_mount_path(a.0, null(), &mut s, null_mut()),
        kcsi_attacher_device_mount_path(a.0, bad.as_ptr(), &mut s, null_mut()),
        kcsi_attacher_device_mount_path(a.0, spec.as_ptr(), null_mut(), null_mut()),
        kcsi_attacher_wait_for_attach(a.0, spec.as_ptr(), 0, null_mut(), null_mut()),
        kcsi_attacher_mount_device(a.0, spec.as_ptr(), null(), null(), null_mut()),
        kcsi_attacher_mount_device(a.0, spec.as_ptr(), spec.as_ptr(), bad.as_ptr(), null_mut()),
        kcsi_attacher_unmount_device(a.0, null(), null_mut()),
        kcsi_block_mapper_new(host.ptr, spec.as_ptr(), null(), &mut null_mut(), null_mut()),
        kcsi_block_mapper_paths(null_mut(), &mut s, null_mut()),
        kcsi_block_mapper_set_up_device(null_mut(), &mut s, null_mut()),
        kcsi_block_mapper_map_pod_device(null_mut(), &mut s, null_mut()),
        kcsi_block_unmapper_new(host.ptr, null(), spec.as_ptr(), &mut null_mut(), null_mut()),
        kcsi_block_unmapper_unmap_pod_device(null_mut(), null_mut()),
        kcsi_block_unmapper_tear_down_device(null_mut(), null(), null(), null_mut()),
        kcsi_construct_block_volume_spec(
            host.ptr,
            null(),
            spec.as_ptr(),
            spec.as_ptr(),
            &mut s,
            null_mut(),
        ),
        kcsi_node_expand(host.ptr, null(), &mut resized, null_mut()),
        kcsi_node_expand(host.ptr, bad.as_ptr(), &mut resized, null_mut()),
        kcsi_node_expand(null_mut(), bad.as_ptr(), &mut resized, null_mut()),
    ];
    for (i, rc) in rcs.into_iter().enumerate() {
        assert_eq!(rc, KCSI_ERR_INVALID_ARGUMENT, "call #{i}");
    }
    assert!(s.is_null(), "no output written on error");
    kcsi_attacher_free(null_mut());
    kcsi_block_mapper_free(null_mut());
    kcsi_block_unmapper_free(null_mut());
}
