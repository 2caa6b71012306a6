//! WaitForAttach and MountDevice against a real kube-apiserver: the VolumeAttachment states
//! upstream distinguishes, the publish context taken from it, and stage secrets.

use kcsi_testkit as common;

use std::time::Duration;

use common::apiserver::*;
use common::capi::*;
use common::{DriverProcess, DRIVER};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kcsi::ffi::*;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// A host with a kubeconfig on its own Node, with the real hostpath driver registered.
struct ApiFixture {
    node: String,
    host: Host,
    driver: DriverProcess,
}

impl ApiFixture {
    fn new() -> ApiFixture {
        let api = ApiServer::shared();
        let node = unique("att");
        create_node(&admin(), &node, &[], &[], &[]);
        let driver = DriverProcess::hostpath(&node, &[]);
        let root = common::short_tempdir("kcsi-root");
        let config: Value = serde_json::from_str(&api.host_config(root.path(), &node)).unwrap();
        let host = Host::owning(root, &config);
        common::wait_for("CSIDriver informer sync", Duration::from_secs(30), || {
            host.status()["csiDriversSynced"] == true
        });
        host.register_driver(&driver);
        ApiFixture { node, host, driver }
    }

    fn attachment_name(&self, handle: &str) -> String {
        kcsi::attachment_name(handle, DRIVER, &self.node)
    }

    /// Creates the VolumeAttachment for `handle` on this node, with `status` set through the
    /// status subresource when given.
    fn create_va(&self, handle: &str, status: Option<Value>, finalizers: &[&str]) -> String {
        let name = self.attachment_name(handle);
        let va: VolumeAttachment = serde_json::from_value(json!({
            "metadata": {"name": name, "finalizers": finalizers},
            "spec": {"attacher": DRIVER, "nodeName": self.node, "source": {"persistentVolumeName": format!("pv-{handle}")}},
        }))
        .unwrap();
        let c = admin();
        let vas: Api<VolumeAttachment> = Api::all(c.client.clone());
        run(vas.create(&PostParams::default(), &va)).expect("create VolumeAttachment");
        if let Some(status) = status {
            run(vas.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            ))
            .expect("set VolumeAttachment status");
        }
        name
    }
}

fn spec(handle: &str, csi: Value) -> Value {
    pv_spec(&format!("pv-{handle}"), handle, false, csi, json!({}))
}

#[test]
fn wait_for_attach_returns_the_attachment_name_once_attached() {
    let f = ApiFixture::new();
    let name = f.create_va("vol-ok", Some(json!({"attached": true})), &[]);
    assert_eq!(
        f.host
            .attacher()
            .wait_for_attach(&spec("vol-ok", json!({})), 5000)
            .unwrap(),
        name
    );
}

#[test]
fn wait_for_attach_without_volume_attachment_is_transient() {
    let f = ApiFixture::new();
    let err = f
        .host
        .attacher()
        .wait_for_attach(&spec("vol-none", json!({})), 0)
        .unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT, "{err:?}");
    let prefix = format!(
        "volume vol-none has GET error for volume attachment {}",
        f.attachment_name("vol-none")
    );
    assert!(err.message.starts_with(&prefix), "{}", err.message);
}

#[test]
fn wait_for_attach_not_yet_attached_is_transient() {
    let f = ApiFixture::new();
    let name = f.create_va("vol-wait", None, &[]);
    let err = f
        .host
        .attacher()
        .wait_for_attach(&spec("vol-wait", json!({})), 0)
        .unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT, "{err:?}");
    assert_eq!(
        err.message,
        format!("volume vol-wait is not attached for volume attachment {name}")
    );
}

#[test]
fn wait_for_attach_reports_the_attach_error_message_verbatim() {
    let f = ApiFixture::new();
    let status = json!({"attached": false, "attachError": {"message": "attacher error", "time": "2026-01-01T00:00:00Z"}});
    f.create_va("vol-err", Some(status), &[]);
    let err = f
        .host
        .attacher()
        .wait_for_attach(&spec("vol-err", json!({})), 0)
        .unwrap_err();
    assert_eq!(
        (err.message.as_str(), err.class),
        ("attacher error", KCSI_CLASS_FINAL),
        "{err:?}"
    );
}

#[test]
fn wait_for_attach_of_an_attachment_being_deleted_fails() {
    let f = ApiFixture::new();
    let finalizer = "kcsi.test/hold";
    let name = f.create_va("vol-del", Some(json!({"attached": true})), &[finalizer]);
    let c = admin();
    let vas: Api<VolumeAttachment> = Api::all(c.client.clone());
    run(vas.delete(&name, &DeleteParams::default())).expect("delete VolumeAttachment");
    let err = f
        .host
        .attacher()
        .wait_for_attach(&spec("vol-del", json!({})), 0)
        .unwrap_err();
    run(vas.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    ))
    .unwrap();
    assert_eq!(
        (err.message.as_str(), err.class),
        ("volume attachment is being deleted", KCSI_CLASS_FINAL),
        "{err:?}"
    );
}

#[test]
fn mount_device_sends_attachment_metadata_as_publish_context() {
    let f = ApiFixture::new();
    let handle = f.driver.create_volume("pv-ctx", false, 1 << 20);
    f.create_va(
        &handle,
        Some(json!({"attached": true, "attachmentMetadata": {"devicePath": "/dev/fake"}})),
        &[],
    );
    let a = f.host.attacher();
    let s = spec(&handle, json!({}));
    let dmp = a.device_mount_path(&s).unwrap();
    a.mount_device(&s, &dmp, None).unwrap();
    let req = &f.driver.calls("NodeStageVolume")[0]["Request"];
    assert_eq!(req["publish_context"], json!({"devicePath": "/dev/fake"}));
    a.unmount_device(&dmp).unwrap();
}

#[test]
fn mount_device_without_volume_attachment_is_transient_and_creates_nothing() {
    let f = ApiFixture::new();
    let a = f.host.attacher();
    let s = spec("vol-missing", json!({}));
    let dmp = a.device_mount_path(&s).unwrap();
    let err = a.mount_device(&s, &dmp, None).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT, "{err:?}");
    assert!(!std::path::Path::new(&dmp).exists());
    assert!(f.driver.calls("NodeStageVolume").is_empty());
}

#[test]
fn mount_device_sends_the_stage_secret_and_a_missing_one_is_transient() {
    let f = ApiFixture::new();
    let ns = "default";
    let secret_name = unique("stage-secret");
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": secret_name}, "stringData": {"password": "s3cr3t"}}),
    )
    .unwrap();
    let c = admin();
    run(Api::<Secret>::namespaced(c.client.clone(), ns).create(&PostParams::default(), &secret))
        .expect("create Secret");
    let handle = f.driver.create_volume("pv-secret", false, 1 << 20);
    f.create_va(&handle, Some(json!({"attached": true})), &[]);
    let a = f.host.attacher();

    let missing = spec(
        &handle,
        json!({"nodeStageSecretRef": {"name": "nope", "namespace": ns}}),
    );
    let dmp = a.device_mount_path(&missing).unwrap();
    let err = a.mount_device(&missing, &dmp, None).unwrap_err();
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT, "{err:?}");
    assert!(
        err.message
            .starts_with("fetching NodeStageSecretRef default/nope failed"),
        "{}",
        err.message
    );

    let with_secret = spec(
        &handle,
        json!({"nodeStageSecretRef": {"name": secret_name, "namespace": ns}}),
    );
    a.mount_device(&with_secret, &dmp, None).unwrap();
    let req = &f.driver.calls("NodeStageVolume")[0]["Request"];
    assert_eq!(req["secrets"], json!({"password": "s3cr3t"}), "{req}");
    a.unmount_device(&dmp).unwrap();
}
