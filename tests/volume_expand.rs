//! Node expansion (NodeExpandVolume) through the C API against the real csi-driver-host-path
//! (csi-fault-driver for the error codes): the request kcsi builds and upstream's error mapping.

use kcsi_testkit as common;

use common::capi::*;
use common::*;
use kcsi::ffi::*;
use serde_json::{json, Value};

const MIB: i64 = 1 << 20;

fn options(spec: Value, extra: Value) -> Value {
    let mut o = json!({"spec": spec, "newSize": "1.5Gi", "oldSize": "1Gi"});
    o.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    o
}

fn fs_spec(handle: &str) -> Value {
    pv_spec(
        "pv-fs",
        handle,
        false,
        json!({"fsType": "ext4"}),
        json!({"mountOptions": ["noatime"]}),
    )
}

/// A filesystem volume and an existing directory to expand at.
fn fs_volume(f: &Fixture) -> (String, String) {
    let handle = f.driver.create_volume("pv-fs", false, MIB);
    let dir = f.root().join("mount");
    std::fs::create_dir_all(&dir).unwrap();
    (handle, dir.display().to_string())
}

/// NodeExpand of a new filesystem volume at an existing directory.
fn expand_fs_volume(f: &Fixture) -> Result<bool, CErr> {
    let (handle, dir) = fs_volume(f);
    f.host
        .expand(&options(fs_spec(&handle), json!({"deviceMountPath": dir})))
}

#[test]
fn node_expand_sends_new_size_paths_and_mount_capability() {
    let f = Fixture::new(no_attach(json!({})));
    let (handle, dir) = fs_volume(&f);
    let stage = "/stage/path";
    let opts = options(
        fs_spec(&handle),
        json!({"deviceMountPath": dir, "deviceStagePath": stage, "devicePath": "ignored"}),
    );
    assert!(f.host.expand(&opts).unwrap());
    let req = &f.driver.calls("NodeExpandVolume")[0]["Request"];
    assert_eq!(req["volume_id"], handle.as_str());
    assert_eq!(req["volume_path"], dir.as_str());
    assert_eq!(req["staging_target_path"], stage);
    assert_eq!(req["capacity_range"]["required_bytes"], 3 * (1i64 << 29));
    let cap = req["volume_capability"].to_string();
    assert!(
        cap.contains("ext4") && cap.contains("noatime") && block_capability(req).is_null(),
        "{cap}"
    );
}

#[test]
fn node_expand_without_expand_capability_is_not_supported() {
    let f = Fixture::with(
        DriverProcess::hostpath("node-1", &["--disable-node-expansion"]),
        no_attach(json!({})),
    );
    let err = expand_fs_volume(&f).unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_NOT_SUPPORTED, KCSI_CLASS_FINAL),
        "{err:?}"
    );
    assert_eq!(
        err.message,
        format!("NodeExpand is not supported by the CSI driver {DRIVER}")
    );
    assert!(f.driver.calls("NodeExpandVolume").is_empty());
}

#[test]
fn node_expand_driver_codes_are_all_final_as_upstream_wraps_them() {
    // (code, infeasible): upstream's expander wraps even the codes its client marks uncertain
    // (Unavailable, Aborted, ResourceExhausted) in a plain error, which the kubelet treats as
    // finished: it marks the expansion failed instead of retrying it as in progress.
    let cases = [
        (9, false),
        (3, true),
        (11, true),
        (5, true),
        (13, false),
        (14, false),
        (10, false),
        (8, false),
    ];
    for (code, infeasible) in cases {
        let class = KCSI_CLASS_FINAL;
        let f = Fixture::faulty(
            &[&format!("--fail-rpc=NodeExpandVolume={code}")],
            no_attach(json!({})),
        );
        let err = expand_fs_volume(&f).unwrap_err();
        assert_eq!((err.grpc, err.class), (code, class), "code {code}: {err:?}");
        assert!(
            err.message
                .contains("Expander.NodeExpand failed to expand the volume"),
            "{}",
            err.message
        );
        assert_eq!(
            err.message.contains("infeasible"),
            infeasible,
            "code {code}: {}",
            err.message
        );
        // What the kubelet's events and the claim's conditions show: upstream's words
        // (expander.go nodeExpandWithClient), the driver's gRPC status as grpc-go prints it,
        // and none of the context kcsi's own message adds.
        let upstream = if infeasible {
            "Expander.NodeExpand failed to expand the volume rpc error: code = "
        } else {
            "Expander.NodeExpand failed to expand the volume : rpc error: code = "
        };
        assert!(
            err.upstream.starts_with(upstream) && !err.upstream.contains(DRIVER),
            "code {code}: {}",
            err.upstream
        );
        assert!(err.message.contains(DRIVER), "{}", err.message);
    }
}

#[test]
fn node_expand_block_volume_uses_device_path_and_block_capability() {
    let f = Fixture::new(no_attach(json!({})));
    let handle = f.driver.create_volume("pv-blk", true, 4 * MIB);
    let spec = pv_spec("pv-blk", &handle, true, json!({}), json!({}));
    let m = f.host.mapper(&spec, &pod("p", "uid-1")).unwrap();
    let staging = m.set_up_device().unwrap();
    let device = m.map_pod_device().unwrap();
    let result = f.host.expand(&options(
        spec,
        json!({"devicePath": device, "deviceMountPath": "/not/used", "deviceStagePath": staging, "newSize": "8Mi"}),
    ));
    let u = f.host.unmapper("pv-blk", "uid-1").unwrap();
    u.unmap_pod_device().unwrap();
    u.tear_down_device("").unwrap();
    assert!(result.unwrap());
    let req = &f.driver.calls("NodeExpandVolume")[0]["Request"];
    assert_eq!(req["volume_path"], device.as_str());
    assert_eq!(req["capacity_range"]["required_bytes"], 8 * MIB);
    let cap = req["volume_capability"].to_string();
    assert!(
        block_capability(req).is_object() && mount_capability(req).is_null(),
        "{cap}"
    );
}

#[test]
fn node_expand_capability_probe_failure_is_final() {
    let f = Fixture::faulty(&["--fail-rpc=NodeGetCapabilities=14"], no_attach(json!({})));
    let err = expand_fs_volume(&f).unwrap_err();
    assert_eq!((err.grpc, err.class), (14, KCSI_CLASS_FINAL), "{err:?}");
    assert!(
        err.message
            .contains("Expander.NodeExpand failed to check if node supports expansion"),
        "{}",
        err.message
    );
}

#[test]
fn node_expand_secret_that_cannot_be_read_is_final() {
    let f = Fixture::new(no_attach(json!({})));
    let (handle, dir) = fs_volume(&f);
    let spec = pv_spec(
        "pv-fs",
        &handle,
        false,
        json!({"nodeExpandSecretRef": {"name": "s", "namespace": "ns"}}),
        json!({}),
    );
    let err = f
        .host
        .expand(&options(spec, json!({"deviceMountPath": dir})))
        .unwrap_err();
    // Upstream: fmt.Errorf("expander.NodeExpand failed to get NodeExpandSecretRef ..."), final.
    assert_eq!(err.class, KCSI_CLASS_FINAL, "{err:?}");
    assert!(
        err.message
            .starts_with("fetching NodeExpandSecretRef ns/s failed"),
        "{}",
        err.message
    );
    assert!(f.driver.calls("NodeExpandVolume").is_empty());
}

#[test]
fn node_expand_for_unregistered_driver_is_transient() {
    let host = Host::new(json!({}));
    let err = host
        .expand(&options(fs_spec("vol-1"), json!({"deviceMountPath": "/x"})))
        .unwrap_err();
    assert_eq!(
        (err.result, err.class),
        (KCSI_ERR_NOT_FOUND, KCSI_CLASS_TRANSIENT),
        "{err:?}"
    );
}

#[test]
fn node_expand_rejects_malformed_options_naming_them() {
    let host = Host::new(json!({}));
    let err = host
        .expand(&options(fs_spec("vol-1"), json!({"newSize": "1.5GB"})))
        .unwrap_err();
    assert_eq!(err.result, KCSI_ERR_INVALID_ARGUMENT);
    assert!(
        err.message.contains("newSize") && err.message.contains("\"1.5GB\""),
        "{}",
        err.message
    );
    let err = host
        .expand(&options(fs_spec("vol-1"), json!({"oldSize": "x"})))
        .unwrap_err();
    assert!(err.message.contains("oldSize"), "{}", err.message);
    let err = host
        .expand(&options(fs_spec("vol-1"), json!({"bogus": 1})))
        .unwrap_err();
    assert!(err.message.contains("bogus"), "{}", err.message);
    let inline = json!({"volume": {"name": "v", "csi": {"driver": DRIVER}}});
    let err = host.expand(&options(inline, json!({}))).unwrap_err();
    assert!(
        err.message
            .contains("Expander.NodeExpand failed to get CSI persistent source"),
        "{}",
        err.message
    );
}
