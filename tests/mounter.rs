//! Mounter / unmounter / metrics / reconstruction through the C API against the stand-in
//! hostpath driver, with real bind mounts (run as root).

mod common;

use std::ffi::{c_char, CStr, CString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::ptr;
use std::time::Duration;

use common::{host_config, unmount_below, DriverProcess, DRIVER};
use hyper_util::rt::TokioIo;
use kcsi::csi::proto::csi;
use kcsi::disk::paths::Layout;
use kcsi::ffi::error::{
    kcsi_error, kcsi_error_class, kcsi_error_free, kcsi_error_grpc_code, kcsi_error_message,
    kcsi_error_result, kcsi_string_free,
};
use kcsi::ffi::host::{kcsi_host, kcsi_host_free, kcsi_host_new};
use kcsi::ffi::mounter::*;
use kcsi::ffi::reconstruct::kcsi_construct_volume_spec;
use kcsi::ffi::registration::{kcsi_deregister_plugin, kcsi_register_plugin};
use kcsi::ffi::*;
use serde_json::{json, Value};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

// ---------------------------------------------------------------------------------------------
// C API plumbing

#[derive(Debug)]
struct CErr {
    code: kcsi_result,
    class: i32,
    grpc: i32,
    message: String,
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// Runs one fallible C call, turning `err_out` into a `CErr`.
fn call(f: impl FnOnce(*mut *mut kcsi_error) -> kcsi_result) -> Result<(), CErr> {
    let mut err: *mut kcsi_error = ptr::null_mut();
    let code = f(&mut err);
    if code == KCSI_OK {
        assert!(err.is_null());
        return Ok(());
    }
    assert!(!err.is_null(), "error object for result {code}");
    let e = CErr {
        code: kcsi_error_result(err),
        class: kcsi_error_class(err),
        grpc: kcsi_error_grpc_code(err),
        message: unsafe { CStr::from_ptr(kcsi_error_message(err)) }
            .to_str()
            .unwrap()
            .to_string(),
    };
    kcsi_error_free(err);
    assert_eq!(e.code, code);
    Err(e)
}

fn take_string(p: *mut c_char) -> String {
    let s = unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string();
    kcsi_string_free(p);
    s
}

/// A kcsi host on its own root; unmounts everything below the root when dropped.
struct Node {
    root: tempfile::TempDir,
    host: *mut kcsi_host,
}

// The C API allows calls on one host from any thread.
unsafe impl Sync for Node {}

impl Node {
    /// `extra` is merged into the minimal config (e.g. `csiDrivers`, `featureGates`).
    fn new(extra: Value) -> Node {
        Self::on_root(common::short_tempdir("kcsi-root"), extra)
    }

    fn on_root(root: tempfile::TempDir, extra: Value) -> Node {
        let mut config: Value = serde_json::from_str(&host_config(root.path(), "node-1")).unwrap();
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let mut host = ptr::null_mut();
        let text = c(&config.to_string());
        call(|e| kcsi_host_new(text.as_ptr(), &mut host, e)).unwrap();
        Node { root, host }
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    fn register(&self, d: &DriverProcess) {
        let (name, endpoint, v) = (c(&d.name), c(&d.endpoint()), c("1.0.0"));
        let versions = [v.as_ptr()];
        call(|e| {
            kcsi_register_plugin(
                self.host,
                name.as_ptr(),
                endpoint.as_ptr(),
                versions.as_ptr(),
                1,
                0,
                e,
            )
        })
        .unwrap();
    }

    fn mounter(&self, spec: &Value, pod: &Value) -> Result<Mounter, CErr> {
        let (spec, pod) = (c(&spec.to_string()), c(&pod.to_string()));
        let mut m = ptr::null_mut();
        call(|e| kcsi_mounter_new(self.host, spec.as_ptr(), pod.as_ptr(), &mut m, e))?;
        Ok(Mounter(m))
    }

    fn unmounter(&self, spec_name: &str, pod_uid: &str) -> Result<Unmounter, CErr> {
        let (spec, uid) = (c(spec_name), c(pod_uid));
        let mut u = ptr::null_mut();
        call(|e| kcsi_unmounter_new(self.host, spec.as_ptr(), uid.as_ptr(), &mut u, e))?;
        Ok(Unmounter(u))
    }

    fn tear_down(&self, spec_name: &str, pod_uid: &str) -> Result<(), CErr> {
        self.unmounter(spec_name, pod_uid)?.tear_down()
    }

    fn construct(&self, mount_path: &Path) -> Result<Value, CErr> {
        let (name, path) = (c("vol"), c(&mount_path.display().to_string()));
        let mut out = ptr::null_mut();
        call(|e| kcsi_construct_volume_spec(self.host, name.as_ptr(), path.as_ptr(), &mut out, e))?;
        Ok(serde_json::from_str(&take_string(out)).unwrap())
    }

    fn layout(&self) -> Layout {
        Layout::new(self.root())
    }

    /// Frees the host early (as a restarting kubelet would), keeping the root.
    fn free_host(&mut self) {
        kcsi_host_free(std::mem::replace(&mut self.host, ptr::null_mut()));
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        unmount_below(self.root.path());
        kcsi_host_free(self.host);
    }
}

struct Mounter(*mut kcsi_mounter);

// The C API allows calls on one handle from any thread.
unsafe impl Send for Mounter {}
unsafe impl Sync for Mounter {}

impl Mounter {
    fn path(&self) -> PathBuf {
        let mut out = ptr::null_mut();
        call(|e| kcsi_mounter_path(self.0, &mut out, e)).unwrap();
        PathBuf::from(take_string(out))
    }

    fn set_up(&self, args: Option<Value>) -> Result<(), CErr> {
        let args = args.map(|a| c(&a.to_string()));
        call(|e| kcsi_mounter_set_up(self.0, args.as_ref().map_or(ptr::null(), |a| a.as_ptr()), e))
    }

    fn metrics(&self) -> Result<Value, CErr> {
        let mut out = ptr::null_mut();
        call(|e| kcsi_mounter_metrics(self.0, &mut out, e))?;
        Ok(serde_json::from_str(&take_string(out)).unwrap())
    }
}

impl Drop for Mounter {
    fn drop(&mut self) {
        kcsi_mounter_free(self.0);
    }
}

struct Unmounter(*mut kcsi_unmounter);

impl Unmounter {
    fn tear_down(&self) -> Result<(), CErr> {
        call(|e| kcsi_unmounter_tear_down(self.0, e))
    }
}

impl Drop for Unmounter {
    fn drop(&mut self) {
        kcsi_unmounter_free(self.0);
    }
}

// ---------------------------------------------------------------------------------------------
// Kubernetes objects and the driver side

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

/// A CSIDriver stand-in for the host config.
fn csi_driver(spec: Value) -> Value {
    json!({"metadata": {"name": DRIVER}, "spec": spec})
}

/// Standalone hosts have no VolumeAttachments: PV tests use a driver that needs no attach.
fn no_attach(extra: Value) -> Value {
    let mut spec = json!({"attachRequired": false});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"csiDrivers": [csi_driver(spec)]})
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn channel(socket: &Path) -> Channel {
    let path = socket.to_path_buf();
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
        .unwrap()
}

fn mount_capability() -> csi::VolumeCapability {
    use csi::volume_capability::{access_mode::Mode, AccessMode, AccessType, MountVolume};
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

/// Controller.CreateVolume on the driver's socket; returns the volume id.
fn create_volume(d: &DriverProcess, name: &str) -> String {
    rt().block_on(async {
        let mut client = csi::controller_client::ControllerClient::new(channel(&d.socket).await);
        let req = csi::CreateVolumeRequest {
            name: name.to_string(),
            volume_capabilities: vec![mount_capability()],
            ..Default::default()
        };
        client
            .create_volume(req)
            .await
            .unwrap()
            .into_inner()
            .volume
            .unwrap()
            .volume_id
    })
}

/// NodeStage at the kubelet's global mount path (the attacher's job, done directly here).
fn stage(d: &DriverProcess, node: &Node, handle: &str) -> PathBuf {
    let staging = node.layout().device_mount_path(DRIVER, handle).unwrap();
    kcsi::disk::volume_data::make_dirs(&staging).unwrap();
    rt().block_on(async {
        let mut client = csi::node_client::NodeClient::new(channel(&d.socket).await);
        let req = csi::NodeStageVolumeRequest {
            volume_id: handle.to_string(),
            staging_target_path: staging.display().to_string(),
            volume_capability: Some(mount_capability()),
            ..Default::default()
        };
        client.node_stage_volume(req).await.unwrap();
    });
    staging
}

fn unstage(d: &DriverProcess, handle: &str, staging: &Path) {
    rt().block_on(async {
        let mut client = csi::node_client::NodeClient::new(channel(&d.socket).await);
        let req = csi::NodeUnstageVolumeRequest {
            volume_id: handle.to_string(),
            staging_target_path: staging.display().to_string(),
        };
        client.node_unstage_volume(req).await.unwrap();
    });
}

/// The requests the driver logged for `method` (short name), oldest first.
fn requests(d: &DriverProcess, method: &str) -> Vec<Value> {
    let suffix = format!("/{method}");
    d.log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["method"].as_str().is_some_and(|m| m.ends_with(&suffix)))
        .map(|v| v["request"].clone())
        .collect()
}

fn last_publish(d: &DriverProcess) -> Value {
    requests(d, "NodePublishVolume")
        .pop()
        .expect("a NodePublishVolume request")
}

fn is_mounted(path: &Path) -> bool {
    kcsi::disk::volume_data::is_mount_point(path).unwrap()
}

fn vol_data(mount_path: &Path) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(mount_path.parent().unwrap().join("vol_data.json")).unwrap(),
    )
    .unwrap()
}

/// A PV published on a driver without staging (most fault tests need no NodeStage).
fn unstaged_driver(flags: &[&str]) -> DriverProcess {
    let mut all = vec!["--disable-node-cap=STAGE_UNSTAGE_VOLUME"];
    all.extend_from_slice(flags);
    DriverProcess::hostpath("node-1", &all)
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn filesystem_pv_is_published_written_measured_and_torn_down() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let node = Node::new(no_attach(json!({"podInfoOnMount": true})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-1");
    let staging = stage(&driver, &node, &handle);

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
    assert!(is_mounted(&path));
    let parent_mode = std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777;
    assert_eq!(parent_mode, 0o750);

    // Data written through the pod's path lands in the driver's volume.
    std::fs::write(path.join("hello.txt"), "through the pod").unwrap();
    let backing = driver
        .dir
        .path()
        .join("state")
        .join(&handle)
        .join("hello.txt");
    assert_eq!(std::fs::read_to_string(backing).unwrap(), "through the pod");

    let req = last_publish(&driver);
    assert_eq!(req["volume_id"], handle.as_str());
    assert_eq!(req["target_path"], path.display().to_string());
    assert_eq!(req["staging_target_path"], staging.display().to_string());
    assert_eq!(req["volume_capability"]["mount"]["fs_type"], "ext4");
    assert_eq!(
        req["volume_capability"]["mount"]["mount_flags"],
        json!(["foo=bar", "baz=qux"])
    );
    assert!(req["volume_capability"]["mount"]
        .get("volume_mount_group")
        .is_none());
    // The driver has SINGLE_NODE_MULTI_WRITER: ReadWriteOnce maps to it.
    assert_eq!(
        req["volume_capability"]["access_mode"]["mode"],
        "SINGLE_NODE_MULTI_WRITER"
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
    let attachment = kcsi::disk::paths::attachment_name(&handle, DRIVER, "node-1");
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
    assert!(!is_mounted(&path));
    assert!(
        !path.parent().unwrap().exists(),
        "mount dir and vol_data.json removed"
    );
    assert!(requests(&driver, "NodeUnpublishVolume").len() == 1);
    unstage(&driver, &handle, &staging);
}

#[test]
fn ephemeral_inline_volume_is_created_on_publish_and_removed_on_teardown() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let modes = json!({"volumeLifecycleModes": ["Ephemeral"], "podInfoOnMount": true});
    let node = Node::new(json!({"csiDrivers": [csi_driver(modes)]}));
    node.register(&driver);

    let m = node
        .mounter(&inline_spec("test-vol"), &pod(POD_UID))
        .unwrap();
    m.set_up(None).unwrap();
    let path = m.path();
    assert!(is_mounted(&path));
    let handle = kcsi::disk::paths::ephemeral_volume_handle(POD_UID, "test-vol");
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
    assert!(driver.dir.path().join("state").join(&handle).is_dir());

    node.tear_down("test-vol", POD_UID).unwrap();
    assert!(!path.parent().unwrap().exists());
    assert!(
        !driver.dir.path().join("state").join(&handle).exists(),
        "driver deleted the ephemeral volume"
    );
}

#[test]
fn lifecycle_mode_not_supported_by_driver_is_transient() {
    let driver = unstaged_driver(&[]);
    let no_csidriver = Node::new(json!({}));
    no_csidriver.register(&driver);
    let err = no_csidriver
        .mounter(&inline_spec("v"), &pod(POD_UID))
        .unwrap()
        .set_up(None)
        .unwrap_err();
    assert_eq!(
        (err.code, err.class),
        (KCSI_ERR_NOT_SUPPORTED, KCSI_CLASS_TRANSIENT)
    );
    assert_eq!(
        err.message,
        format!(
            "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: \
             volume mode \"Ephemeral\" not supported by driver {DRIVER} (no CSIDriver object)"
        )
    );

    let ephemeral_only = Node::new(no_attach(json!({"volumeLifecycleModes": ["Ephemeral"]})));
    ephemeral_only.register(&driver);
    let handle = create_volume(&driver, "pv-x");
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
    assert!(requests(&driver, "NodePublishVolume").is_empty());
}

#[test]
fn mounter_path_follows_kubelet_layout() {
    let node = Node::new(json!({}));
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
    let node = Node::new(json!({}));
    for uid in ["..", ".", "a/b", "/abs", ""] {
        let err = node
            .mounter(&pv_spec("pv", "h"), &pod(uid))
            .err()
            .expect(uid);
        assert_eq!(
            err.code, KCSI_ERR_INVALID_ARGUMENT,
            "{uid}: {}",
            err.message
        );
        let err = node.unmounter("pv", uid).err().expect(uid);
        assert_eq!(
            err.code, KCSI_ERR_INVALID_ARGUMENT,
            "{uid}: {}",
            err.message
        );
    }
    for spec in ["..", "."] {
        let err = node
            .mounter(&pv_spec(spec, "h"), &pod(POD_UID))
            .err()
            .expect(spec);
        assert_eq!(err.code, KCSI_ERR_INVALID_ARGUMENT);
        assert_eq!(
            node.unmounter(spec, POD_UID).err().expect(spec).code,
            KCSI_ERR_INVALID_ARGUMENT
        );
    }
    // A NUL cannot pass through C; JSON can carry one.
    let err = node
        .mounter(&pv_spec("a\0b", "h"), &pod(POD_UID))
        .err()
        .unwrap();
    assert_eq!(err.code, KCSI_ERR_INVALID_ARGUMENT);
    let err = node
        .mounter(&pv_spec("pv", "h"), &pod("u\0"))
        .err()
        .unwrap();
    assert_eq!(err.code, KCSI_ERR_INVALID_ARGUMENT);

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
            err.code,
            KCSI_ERR_INVALID_ARGUMENT,
            "{}: {}",
            bad.display(),
            err.message
        );
    }
    assert_eq!(
        node.construct(&inside).unwrap_err().code,
        KCSI_ERR_NOT_FOUND
    );

    // NULL arguments and output pointers.
    let mut m = ptr::null_mut();
    let err =
        call(|e| kcsi_mounter_new(node.host, ptr::null(), ptr::null(), &mut m, e)).unwrap_err();
    assert_eq!(err.code, KCSI_ERR_INVALID_ARGUMENT);
    assert_eq!(
        call(|e| kcsi_mounter_set_up(ptr::null_mut(), ptr::null(), e))
            .unwrap_err()
            .code,
        KCSI_ERR_INVALID_ARGUMENT
    );
    kcsi_mounter_free(ptr::null_mut());
    kcsi_unmounter_free(ptr::null_mut());
}

#[test]
fn set_up_rejects_unknown_args_keys() {
    let node = Node::new(json!({}));
    let m = node.mounter(&pv_spec("pv", "h"), &pod(POD_UID)).unwrap();
    let err = m.set_up(Some(json!({"fsUser": 1}))).unwrap_err();
    assert_eq!(err.code, KCSI_ERR_INVALID_ARGUMENT);
    assert!(err.message.contains("fsUser"), "{}", err.message);
}

#[test]
fn selinux_context_is_appended_last_and_recorded_only_when_enabled() {
    let driver = unstaged_driver(&[]);
    let gate_on = Node::new(json!({
        "featureGates": {"SELinuxMountReadWriteOncePod": true},
        "csiDrivers": [csi_driver(json!({"attachRequired": false, "seLinuxMount": true}))]
    }));
    let mut off = no_attach(json!({"seLinuxMount": true}));
    off["featureGates"] = json!({"SELinuxMountReadWriteOncePod": false});
    let gate_off = Node::new(off);
    gate_on.register(&driver);
    gate_off.register(&driver);
    let label = json!({"seLinuxLabel": "s0,c0"});

    let h1 = create_volume(&driver, "pv-se1");
    let m = gate_on
        .mounter(&pv_spec("pv-se1", &h1), &pod("pod-a"))
        .unwrap();
    m.set_up(Some(label.clone())).unwrap();
    let flags = &last_publish(&driver)["volume_capability"]["mount"]["mount_flags"];
    assert_eq!(flags, &json!(["foo=bar", "baz=qux", "context=\"s0,c0\""]));
    assert_eq!(vol_data(&m.path())["seLinuxMountContext"], "s0,c0");
    let rebuilt = gate_on.construct(m.path().parent().unwrap()).unwrap();
    assert_eq!(rebuilt["seLinuxMountContext"], "s0,c0");

    // No label: no option, never `context=""`.
    let h2 = create_volume(&driver, "pv-se2");
    let m2 = gate_on
        .mounter(&pv_spec("pv-se2", &h2), &pod("pod-b"))
        .unwrap();
    m2.set_up(Some(json!({"seLinuxLabel": ""}))).unwrap();
    assert_eq!(
        last_publish(&driver)["volume_capability"]["mount"]["mount_flags"],
        json!(["foo=bar", "baz=qux"])
    );
    assert!(vol_data(&m2.path()).get("seLinuxMountContext").is_none());

    // Gate off: no option even with a label.
    let h3 = create_volume(&driver, "pv-se3");
    let m3 = gate_off
        .mounter(&pv_spec("pv-se3", &h3), &pod("pod-c"))
        .unwrap();
    m3.set_up(Some(label)).unwrap();
    assert_eq!(
        last_publish(&driver)["volume_capability"]["mount"]["mount_flags"],
        json!(["foo=bar", "baz=qux"])
    );
    assert!(vol_data(&m3.path()).get("seLinuxMountContext").is_none());

    gate_on.tear_down("pv-se1", "pod-a").unwrap();
    gate_on.tear_down("pv-se2", "pod-b").unwrap();
    gate_off.tear_down("pv-se3", "pod-c").unwrap();
}

#[test]
fn fs_group_goes_to_volume_mount_group_when_driver_supports_it() {
    let driver = unstaged_driver(&["--enable-volume-mount-group"]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-vmg");
    let m = node
        .mounter(&pv_spec("pv-vmg", &handle), &pod(POD_UID))
        .unwrap();
    m.set_up(Some(json!({"fsGroup": 3000}))).unwrap();
    let req = last_publish(&driver);
    assert_eq!(
        req["volume_capability"]["mount"]["volume_mount_group"],
        "3000"
    );
    assert_eq!(
        req["volume_context"],
        json!({"foo": "bar"}),
        "no pod info without podInfoOnMount"
    );
    // SetUp again (a republish) is idempotent.
    m.set_up(Some(json!({"fsGroup": 3000}))).unwrap();
    assert_eq!(requests(&driver, "NodePublishVolume").len(), 2);
    assert_eq!(
        std::fs::metadata(m.path()).unwrap().gid(),
        3000,
        "the driver applied the group"
    );
    node.tear_down("pv-vmg", POD_UID).unwrap();
}

#[test]
fn fs_group_is_applied_by_kcsi_when_driver_lacks_volume_mount_group() {
    let driver = unstaged_driver(&[]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-fsg");
    // A file the pod will see, owned by root:root 0600.
    let existing = driver
        .dir
        .path()
        .join("state")
        .join(&handle)
        .join("old.txt");
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
    assert!(last_publish(&driver)["volume_capability"]["mount"]
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
    let h2 = create_volume(&driver, "pv-ro");
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
fn unknown_driver_is_transient_for_set_up_teardown_and_metrics() {
    let node = Node::new(json!({}));
    let m = node.mounter(&pv_spec("pv", "h"), &pod(POD_UID)).unwrap();
    let err = m.set_up(None).unwrap_err();
    assert_eq!(
        (err.code, err.class),
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
    let driver = unstaged_driver(&[]);
    let node = Node::new(json!({}));
    node.register(&driver);
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
    assert!(requests(&driver, "NodePublishVolume").is_empty());
}

#[test]
fn deadline_exceeded_from_driver_is_uncertain_and_keeps_volume_data() {
    let driver = unstaged_driver(&["--fail-rpc=NodePublishVolume=4"]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-dl");
    let m = node
        .mounter(&pv_spec("pv-dl", &handle), &pod(POD_UID))
        .unwrap();
    let err = m.set_up(None).unwrap_err();
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
        vol_data(&m.path())["volumeHandle"],
        handle.as_str(),
        "kept for a later teardown"
    );
}

#[test]
fn publish_outliving_the_host_timeout_is_uncertain() {
    let driver = unstaged_driver(&["--hang-rpc=NodePublishVolume"]);
    let mut config = no_attach(json!({}));
    config["timeoutSeconds"] = json!(2);
    let node = Node::new(config);
    node.register(&driver);
    let handle = create_volume(&driver, "pv-hang");
    let m = node
        .mounter(&pv_spec("pv-hang", &handle), &pod(POD_UID))
        .unwrap();
    let err = m.set_up(None).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_UNCERTAIN, "{}", err.message);
    assert!(m.path().parent().unwrap().join("vol_data.json").exists());
}

#[test]
fn driver_killed_mid_publish_is_uncertain() {
    let mut driver = unstaged_driver(&["--hang-rpc=NodePublishVolume"]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-kill");
    let m = node
        .mounter(&pv_spec("pv-kill", &handle), &pod(POD_UID))
        .unwrap();
    let err = std::thread::scope(|s| {
        let publishing = s.spawn(|| m.set_up(None));
        // Capabilities are logged once answered; the publish hangs right after.
        common::wait_for("the capability probe", Duration::from_secs(10), || {
            !requests(&driver, "NodeGetCapabilities").is_empty()
        });
        std::thread::sleep(Duration::from_millis(300));
        driver.kill();
        publishing.join().unwrap()
    })
    .unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_UNCERTAIN, "{}", err.message);
    assert!(
        m.path().parent().unwrap().join("vol_data.json").exists(),
        "kept for a later teardown"
    );
}

#[test]
fn restarted_driver_on_same_socket_serves_next_call() {
    let mut driver = unstaged_driver(&[]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-restart");
    let m = node
        .mounter(&pv_spec("pv-restart", &handle), &pod(POD_UID))
        .unwrap();
    m.set_up(None).unwrap();
    driver.restart();
    assert!(m.metrics().unwrap()["capacityBytes"].as_i64().unwrap() > 0);
    driver.restart();
    node.tear_down("pv-restart", POD_UID).unwrap();
    assert!(!m.path().parent().unwrap().exists());
}

#[test]
fn deregistered_driver_is_transient() {
    let driver = unstaged_driver(&[]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-dereg");
    let m = node
        .mounter(&pv_spec("pv-dereg", &handle), &pod(POD_UID))
        .unwrap();
    m.set_up(None).unwrap();
    let name = c(DRIVER);
    call(|e| kcsi_deregister_plugin(node.host, name.as_ptr(), e)).unwrap();
    let err = node.tear_down("pv-dereg", POD_UID).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT);
    assert!(is_mounted(&m.path()), "nothing changed");
    node.register(&driver);
    node.tear_down("pv-dereg", POD_UID).unwrap();
}

#[test]
fn final_publish_error_removes_dir_and_volume_data() {
    let driver = unstaged_driver(&["--fail-rpc=NodePublishVolume=9"]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-fail");
    let m = node
        .mounter(&pv_spec("pv-fail", &handle), &pod(POD_UID))
        .unwrap();
    let err = m.set_up(None).unwrap_err();
    assert_eq!(
        (err.code, err.class, err.grpc),
        (KCSI_ERR_DRIVER, KCSI_CLASS_FINAL, 9),
        "{}",
        err.message
    );
    assert!(
        !m.path().parent().unwrap().exists(),
        "dir and vol_data.json removed"
    );
}

#[test]
fn final_publish_error_keeps_dir_that_is_mounted() {
    let driver = unstaged_driver(&["--fail-rpc=NodePublishVolume=9"]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-busy");
    let m = node
        .mounter(&pv_spec("pv-busy", &handle), &pod(POD_UID))
        .unwrap();
    // Something (an earlier publish) is mounted at the target already.
    std::fs::create_dir_all(m.path()).unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(m.path())
        .status()
        .unwrap();
    assert!(status.success());
    let err = m.set_up(None).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_FINAL);
    assert!(is_mounted(&m.path()));
    assert_eq!(
        vol_data(&m.path())["volumeHandle"],
        handle.as_str(),
        "kept: the target is mounted"
    );
}

#[test]
fn teardown_failure_is_final_and_keeps_dir_until_a_retry_succeeds() {
    let driver = unstaged_driver(&["--fail-rpc=NodeUnpublishVolume=13:1"]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-td");
    let m = node
        .mounter(&pv_spec("pv-td", &handle), &pod(POD_UID))
        .unwrap();
    m.set_up(None).unwrap();
    let err = node.tear_down("pv-td", POD_UID).unwrap_err();
    assert_eq!(
        (err.code, err.class, err.grpc),
        (KCSI_ERR_DRIVER, KCSI_CLASS_FINAL, 13)
    );
    assert!(
        err.message
            .starts_with("kubernetes.io/csi: Unmounter.TearDownAt failed: "),
        "{}",
        err.message
    );
    assert!(is_mounted(&m.path()));
    assert!(m.path().parent().unwrap().join("vol_data.json").exists());
    node.tear_down("pv-td", POD_UID).unwrap();
    assert!(!m.path().parent().unwrap().exists());
}

#[test]
fn unmounter_needs_volume_data() {
    let node = Node::new(json!({}));
    let err = node.unmounter("pv", POD_UID).err().unwrap();
    let mount = node
        .root()
        .join("pods/test-pod/volumes/kubernetes.io~csi/pv/mount");
    assert_eq!(err.code, KCSI_ERR_NOT_FOUND);
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
    assert_eq!(err.code, KCSI_ERR_IO);
    assert!(
        err.message.contains("vol_data.json") && err.message.ends_with("EOF"),
        "{}",
        err.message
    );
}

#[test]
fn metrics_need_get_volume_stats_and_report_condition_with_csi_volume_health() {
    let driver = unstaged_driver(&[]);
    let node = Node::new(json!({
        "featureGates": {"CSIVolumeHealth": true},
        "csiDrivers": [csi_driver(json!({"attachRequired": false}))]
    }));
    node.register(&driver);
    let handle = create_volume(&driver, "pv-m");
    let m = node
        .mounter(&pv_spec("pv-m", &handle), &pod(POD_UID))
        .unwrap();
    m.set_up(None).unwrap();
    let metrics = m.metrics().unwrap();
    assert_eq!(
        (&metrics["abnormal"], &metrics["message"]),
        (&json!(false), &json!("volume is healthy"))
    );
    node.tear_down("pv-m", POD_UID).unwrap();

    let no_stats = unstaged_driver(&["--disable-node-cap=STAGE_UNSTAGE_VOLUME,GET_VOLUME_STATS"]);
    let node2 = Node::new(no_attach(json!({})));
    node2.register(&no_stats);
    let m = node2
        .mounter(&pv_spec("pv-m", "any"), &pod(POD_UID))
        .unwrap();
    let err = m.metrics().unwrap_err();
    assert_eq!(err.code, KCSI_ERR_NOT_SUPPORTED);
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
    let mut first = Node::new(config.clone());
    first.register(&driver);
    let handle = create_volume(&driver, "pv-r");
    let staging = stage(&driver, &first, &handle);
    let pv = first
        .mounter(&pv_spec("pv-r", &handle), &pod(POD_UID))
        .unwrap();
    pv.set_up(Some(json!({"seLinuxLabel": "s0,c1"}))).unwrap();
    let inline = first.mounter(&inline_spec("eph"), &pod(POD_UID)).unwrap();
    inline.set_up(None).unwrap();
    let (pv_path, inline_path) = (pv.path(), inline.path());

    // The kubelet restarts: the old host goes, its handles fail cleanly.
    first.free_host();
    let err = pv.metrics().unwrap_err();
    assert_eq!(err.code, KCSI_ERR_FAILED_PRECONDITION);
    drop((pv, inline));
    let root = std::mem::replace(&mut first.root, common::short_tempdir("kcsi-unused"));
    let second = Node::on_root(root, config);
    second.register(&driver);

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
    let (spec, mut out) = (c(&rebuilt["spec"].to_string()), ptr::null_mut());
    call(|e| kcsi::ffi::queries::kcsi_get_volume_name(second.host, spec.as_ptr(), &mut out, e))
        .unwrap();
    assert_eq!(take_string(out), format!("{DRIVER}^{handle}"));

    second.tear_down("pv-r", POD_UID).unwrap();
    second.tear_down("eph", POD_UID).unwrap();
    assert!(!is_mounted(&pv_path) && !is_mounted(&inline_path));
    assert!(!pv_path.parent().unwrap().exists() && !inline_path.parent().unwrap().exists());
    unstage(&driver, &handle, &staging);
}

#[test]
fn failed_volume_data_save_is_transient_and_publishes_nothing() {
    let driver = unstaged_driver(&[]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let m = node
        .mounter(&pv_spec("pv-save", "h"), &pod(POD_UID))
        .unwrap();
    // A directory where the file belongs: the rename onto it fails.
    std::fs::create_dir_all(m.path().parent().unwrap().join("vol_data.json")).unwrap();
    let err = m.set_up(None).unwrap_err();
    assert_eq!(
        (err.code, err.class),
        (KCSI_ERR_IO, KCSI_CLASS_TRANSIENT),
        "{}",
        err.message
    );
    assert!(
        err.message
            .starts_with("kubernetes.io/csi: mounter.SetUpAt failed to save volume info data: "),
        "{}",
        err.message
    );
    assert!(requests(&driver, "NodePublishVolume").is_empty());
}

#[test]
fn many_volumes_set_up_and_tear_down_concurrently_through_one_host() {
    let driver = unstaged_driver(&[]);
    let node = Node::new(no_attach(json!({})));
    node.register(&driver);
    let handles: Vec<String> = (0..8)
        .map(|i| create_volume(&driver, &format!("pv-c{i}")))
        .collect();
    std::thread::scope(|s| {
        for (i, handle) in handles.iter().enumerate() {
            let node = &node;
            s.spawn(move || {
                let (name, uid) = (format!("pv-c{i}"), format!("pod-{}", i % 3));
                let m = node.mounter(&pv_spec(&name, handle), &pod(&uid)).unwrap();
                m.set_up(None).unwrap();
                assert!(is_mounted(&m.path()));
                m.metrics().unwrap();
                node.tear_down(&name, &uid).unwrap();
                assert!(!m.path().parent().unwrap().exists());
            });
        }
    });
    assert_eq!(requests(&driver, "NodeUnpublishVolume").len(), 8);
}
