//! Mounter against a real kube-apiserver: the CSIDriver, VolumeAttachment, Secret and
//! service-account token lookups of SetUp (upstream pkg/volume/csi/csi_mounter.go SetUpAt),
//! through the C API, against the real hostpath driver.

use kcsi_testkit as common;

use std::ffi::{c_char, CStr};
use std::ptr;
use std::time::Duration;

use common::apiserver::*;
use common::capi::{call, Host, Mounter};
use common::DriverProcess;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kcsi::ffi::KCSI_CLASS_TRANSIENT;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

const NS: &str = "default";

/// Everything one test needs: a Node, the real hostpath driver under its own name with its
/// CSIDriver, a pod with its service account, and a kcsi host on that node with the driver
/// registered.
struct Fixture {
    host: Host,
    driver: DriverProcess,
    driver_name: String,
    node: String,
    pod: Pod,
}

impl Fixture {
    fn new(csi_driver_spec: Value) -> Fixture {
        let admin = admin();
        let node = unique("mnt-node");
        let driver_name = format!("{}.csi.k8s.io", unique("mnt"));
        create_node(&admin, &node, &[], &[], &[]);
        create::<CSIDriver>(
            Api::all(admin.client.clone()),
            json!({"metadata": {"name": driver_name}, "spec": csi_driver_spec}),
        );
        let sa = unique("sa");
        create::<ServiceAccount>(
            Api::namespaced(admin.client.clone(), NS),
            json!({"metadata": {"name": sa}}),
        );
        let pod = create::<Pod>(
            Api::namespaced(admin.client.clone(), NS),
            json!({
                "metadata": {"name": unique("pod")},
                "spec": {"serviceAccountName": sa, "nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
            }),
        );

        let driver = DriverProcess::hostpath_named(&driver_name, &node, &[]);
        let root = common::short_tempdir("kcsi-root");
        let config: Value =
            serde_json::from_str(&ApiServer::shared().host_config(root.path(), &node)).unwrap();
        let host = Host::owning(root, &config);
        common::wait_for("CSIDriver objects listed", Duration::from_secs(30), || {
            host.status()["csiDriversSynced"] == true
        });
        host.register_driver(&driver);
        Fixture {
            host,
            driver,
            driver_name,
            node,
            pod,
        }
    }

    /// A new volume, staged at the host's global mount path (hostpathplugin publishes only
    /// what was staged there).
    fn create_volume(&self, name: &str) -> String {
        let handle = self.driver.create_volume(name, false, 0);
        let staging = self
            .host
            .layout()
            .device_mount_path(&self.driver_name, &handle)
            .unwrap();
        std::fs::create_dir_all(&staging).unwrap();
        self.driver.stage(&handle, &staging);
        handle
    }

    /// The attached VolumeAttachment the external attacher would leave, with metadata.
    fn attach(&self, handle: &str, metadata: Value) {
        let name = kcsi::attachment_name(handle, &self.driver_name, &self.node);
        let vas: Api<VolumeAttachment> = Api::all(admin().client.clone());
        create(
            vas.clone(),
            json!({
                "metadata": {"name": name},
                "spec": {"attacher": self.driver_name, "nodeName": self.node, "source": {"persistentVolumeName": handle}}
            }),
        );
        let status = json!({"status": {"attached": true, "attachmentMetadata": metadata}});
        run(vas.patch_status(&name, &PatchParams::default(), &Patch::Merge(status)))
            .expect("VolumeAttachment status");
    }

    fn pv_spec(&self, name: &str, handle: &str, secret: Option<&str>) -> Value {
        let mut csi = json!({"driver": self.driver_name, "volumeHandle": handle, "volumeAttributes": {"foo": "bar"}});
        if let Some(s) = secret {
            csi["nodePublishSecretRef"] = json!({"name": s, "namespace": NS});
        }
        json!({"persistentVolume": {"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"], "csi": csi}}})
    }

    fn mounter(&self, spec: &Value) -> Mounter {
        self.host
            .mounter(spec, &serde_json::to_value(&self.pod).unwrap())
            .unwrap()
    }

    fn tear_down(&self, spec_name: &str) {
        self.host
            .tear_down(spec_name, self.pod.metadata.uid.as_deref().unwrap())
            .unwrap();
    }

    fn last_publish(&self) -> Value {
        self.driver.last_request("NodePublishVolume")
    }
}

static LOGS: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

unsafe extern "C" fn capture(
    _: *mut std::ffi::c_void,
    _: i32,
    target: *const c_char,
    message: *const c_char,
) {
    let (target, message) = unsafe { (CStr::from_ptr(target), CStr::from_ptr(message)) };
    let mut logs = LOGS.lock().unwrap();
    logs.push_str(&format!(
        "{} {}\n",
        target.to_string_lossy(),
        message.to_string_lossy()
    ));
}

/// Captures every log record kcsi emits (trace level), or goes back to stderr.
fn set_log_capture(on: bool) {
    let cb: kcsi::ffi::log::kcsi_log_fn = if on { Some(capture) } else { None };
    call(|e| kcsi::ffi::log::kcsi_set_log_callback(cb, ptr::null_mut(), if on { 4 } else { 1 }, e))
        .unwrap();
}

#[test]
fn publish_gets_attachment_metadata_secret_pod_info_and_tokens_from_the_api() {
    let f = Fixture::new(json!({
        "attachRequired": true,
        "podInfoOnMount": true,
        "tokenRequests": [{"audience": "kcsi-test", "expirationSeconds": 600}]
    }));
    let secrets: Api<Secret> = Api::namespaced(admin().client.clone(), NS);
    create(
        secrets,
        json!({"metadata": {"name": "publish-secret-1"}, "stringData": {"password": "hunter2"}}),
    );
    let handle = f.create_volume("pv-api");

    // Not attached yet: transient, nothing published.
    let m = f.mounter(&f.pv_spec("pv-api", &handle, Some("publish-secret-1")));
    let e = m.set_up(None).unwrap_err();
    let (class, message) = (e.class, e.message);
    assert_eq!(class, KCSI_CLASS_TRANSIENT, "{message}");
    assert!(
        message.starts_with("kubernetes.io/csi: mounter.SetUpAt failed to fetch publishContext: "),
        "{message}"
    );

    f.attach(&handle, json!({"device": "/dev/fake"}));
    // A secret that does not exist: transient.
    let missing = f.mounter(&f.pv_spec("pv-api", &handle, Some("no-such-secret")));
    let e = missing.set_up(None).unwrap_err();
    let (class, message) = (e.class, e.message);
    assert_eq!(class, KCSI_CLASS_TRANSIENT, "{message}");
    assert!(
        message.starts_with("fetching NodePublishSecretRef default/no-such-secret failed: "),
        "{message}"
    );

    set_log_capture(true);
    let result = m.set_up(None);
    set_log_capture(false);
    result.unwrap();
    let req = f.last_publish();
    assert_eq!(req["publish_context"], json!({"device": "/dev/fake"}));
    assert_eq!(
        req["secrets"],
        json!({"password": "hunter2"}),
        "the Secret's data was sent"
    );
    let ctx = &req["volume_context"];
    assert_eq!(ctx["foo"], "bar");
    assert_eq!(
        ctx["csi.storage.k8s.io/pod.name"],
        f.pod.metadata.name.as_deref().unwrap()
    );
    assert_eq!(
        ctx["csi.storage.k8s.io/pod.uid"],
        f.pod.metadata.uid.as_deref().unwrap()
    );
    assert_eq!(ctx["csi.storage.k8s.io/pod.namespace"], NS);
    assert_eq!(ctx["csi.storage.k8s.io/ephemeral"], "false");
    let tokens: Value = serde_json::from_str(
        ctx["csi.storage.k8s.io/serviceAccount.tokens"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let token = &tokens["kcsi-test"];
    assert_eq!(tokens.as_object().unwrap().len(), 1);
    assert!(!token["token"].as_str().unwrap().is_empty());
    assert!(token["expirationTimestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));
    let logs = LOGS.lock().unwrap().clone();
    assert!(!logs.is_empty(), "trace logging captured something");
    for secret in ["hunter2", token["token"].as_str().unwrap()] {
        assert!(
            !logs.contains(secret),
            "a secret or token reached kcsi's log"
        );
    }
    f.tear_down("pv-api");
}

#[test]
fn tokens_go_to_publish_secrets_when_the_csidriver_asks() {
    let f = Fixture::new(json!({
        "attachRequired": false,
        "tokenRequests": [{"audience": ""}],
        "serviceAccountTokenInSecrets": true
    }));
    let handle = f.create_volume("pv-tok");
    let m = f.mounter(&f.pv_spec("pv-tok", &handle, None));
    m.set_up(None).unwrap();
    let req = f.last_publish();
    assert_eq!(
        req["volume_context"],
        json!({"foo": "bar"}),
        "no tokens in the volume context"
    );
    let tokens = req["secrets"]["csi.storage.k8s.io/serviceAccount.tokens"]
        .as_str()
        .expect("the tokens went into the secrets");
    assert!(tokens.contains("\"token\""), "{tokens}");
    assert!(req.get("publish_context").is_none(), "attach not required");
    f.tear_down("pv-tok");
}

#[test]
fn inline_volume_secret_is_read_from_the_pod_namespace() {
    let f = Fixture::new(json!({
        "podInfoOnMount": true,
        "volumeLifecycleModes": ["Ephemeral"]
    }));
    let inline = |secret: &str| json!({"volume": {"name": "eph", "csi": {"driver": f.driver_name, "nodePublishSecretRef": {"name": secret}}}});
    let e = f
        .mounter(&inline("no-such-inline-secret"))
        .set_up(None)
        .unwrap_err();
    let (class, message) = (e.class, e.message);
    assert_eq!(class, KCSI_CLASS_TRANSIENT, "{message}");
    assert!(
        message.starts_with("fetching NodePublishSecretRef default/no-such-inline-secret failed: "),
        "{message}"
    );

    let secrets: Api<Secret> = Api::namespaced(admin().client.clone(), NS);
    create(
        secrets,
        json!({"metadata": {"name": "inline-secret-1"}, "stringData": {"k": "v"}}),
    );
    f.mounter(&inline("inline-secret-1")).set_up(None).unwrap();
    let req = f.last_publish();
    assert_eq!(req["secrets"], json!({"k": "v"}));
    assert_eq!(
        req["volume_context"]["csi.storage.k8s.io/ephemeral"],
        "true"
    );
    f.tear_down("eph");
}
