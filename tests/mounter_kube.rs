//! Mounter against a real kube-apiserver: the CSIDriver, VolumeAttachment, Secret and
//! service-account token lookups of SetUp (upstream `pkg/volume/csi/csi_mounter.go SetUpAt`), through the C API.

mod common;
mod kube_support;

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::time::Duration;

use common::{unmount_below, ApiServer, DriverProcess};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kcsi::csi::proto::csi;
use kcsi::ffi::error::{
    kcsi_error, kcsi_error_class, kcsi_error_free, kcsi_error_message, kcsi_string_free,
};
use kcsi::ffi::host::{kcsi_host, kcsi_host_free, kcsi_host_new, kcsi_host_status};
use kcsi::ffi::mounter::*;
use kcsi::ffi::registration::kcsi_register_plugin;
use kcsi::ffi::{kcsi_result, KCSI_CLASS_TRANSIENT, KCSI_OK};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use kube_support::*;

const NS: &str = "default";

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// One fallible C call: `Err((class, message))` on failure.
fn call(f: impl FnOnce(*mut *mut kcsi_error) -> kcsi_result) -> Result<(), (i32, String)> {
    let mut err: *mut kcsi_error = ptr::null_mut();
    if f(&mut err) == KCSI_OK {
        return Ok(());
    }
    let out = (
        kcsi_error_class(err),
        unsafe { CStr::from_ptr(kcsi_error_message(err)) }
            .to_string_lossy()
            .into_owned(),
    );
    kcsi_error_free(err);
    Err(out)
}

fn create<K>(api: Api<K>, obj: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).unwrap();
    run(api.create(&PostParams::default(), &obj)).expect("create object")
}

/// Everything one test needs: a Node, a driver with its CSIDriver, a pod with its service
/// account, and a kcsi host on that node with the driver registered.
struct Fixture {
    root: tempfile::TempDir,
    host: *mut kcsi_host,
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

        let driver = DriverProcess::hostpath(
            &node,
            &[
                &format!("--drivername={driver_name}"),
                "--disable-node-cap=STAGE_UNSTAGE_VOLUME",
            ],
        );
        let root = common::short_tempdir("kcsi-root");
        let config = ApiServer::shared().host_config(root.path(), &node);
        let mut host = ptr::null_mut();
        let text = c(&config);
        call(|e| kcsi_host_new(text.as_ptr(), &mut host, e)).unwrap();
        let f = Fixture {
            root,
            host,
            driver,
            driver_name,
            node,
            pod,
        };
        common::wait_for("CSIDriver objects listed", Duration::from_secs(30), || {
            f.status()["csiDriversSynced"] == true
        });
        let (name, endpoint, v) = (c(&f.driver_name), c(&f.driver.endpoint()), c("1.0.0"));
        let versions = [v.as_ptr()];
        call(|e| {
            kcsi_register_plugin(
                f.host,
                name.as_ptr(),
                endpoint.as_ptr(),
                versions.as_ptr(),
                1,
                0,
                e,
            )
        })
        .unwrap();
        f
    }

    fn status(&self) -> Value {
        let mut out = ptr::null_mut();
        call(|e| kcsi_host_status(self.host, &mut out, e)).unwrap();
        let text = unsafe { CStr::from_ptr(out) }.to_str().unwrap().to_string();
        kcsi_string_free(out);
        serde_json::from_str(&text).unwrap()
    }

    fn create_volume(&self, name: &str) -> String {
        run(async {
            let path = self.driver.socket.clone();
            let channel = tonic::transport::Endpoint::from_static("http://localhost")
                .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                            tokio::net::UnixStream::connect(path).await?,
                        ))
                    }
                }))
                .await
                .unwrap();
            let mut client = csi::controller_client::ControllerClient::new(channel);
            let cap = csi::VolumeCapability {
                access_type: Some(csi::volume_capability::AccessType::Mount(Default::default())),
                access_mode: Some(csi::volume_capability::AccessMode { mode: 1 }),
            };
            let req = csi::CreateVolumeRequest {
                name: name.into(),
                volume_capabilities: vec![cap],
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

    /// The attached VolumeAttachment the external attacher would leave, with metadata.
    fn attach(&self, handle: &str, metadata: Value) {
        let name = kcsi::disk::paths::attachment_name(handle, &self.driver_name, &self.node);
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
        let (spec, pod) = (
            c(&spec.to_string()),
            c(&serde_json::to_string(&self.pod).unwrap()),
        );
        let mut m = ptr::null_mut();
        call(|e| kcsi_mounter_new(self.host, spec.as_ptr(), pod.as_ptr(), &mut m, e)).unwrap();
        Mounter(m)
    }

    fn tear_down(&self, spec_name: &str) {
        let (spec, uid) = (c(spec_name), c(self.pod.metadata.uid.as_deref().unwrap()));
        let mut u = ptr::null_mut();
        call(|e| kcsi_unmounter_new(self.host, spec.as_ptr(), uid.as_ptr(), &mut u, e)).unwrap();
        let result = call(|e| kcsi_unmounter_tear_down(u, e));
        kcsi_unmounter_free(u);
        result.unwrap();
    }

    fn last_publish(&self) -> Value {
        let mut published: Vec<Value> = self
            .driver
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["method"] == "/csi.v1.Node/NodePublishVolume")
            .collect();
        published.pop().expect("a NodePublishVolume")["request"].clone()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        unmount_below(self.root.path());
        kcsi_host_free(self.host);
    }
}

struct Mounter(*mut kcsi_mounter);

impl Mounter {
    fn set_up(&self) -> Result<(), (i32, String)> {
        call(|e| kcsi_mounter_set_up(self.0, ptr::null(), e))
    }
}

impl Drop for Mounter {
    fn drop(&mut self) {
        kcsi_mounter_free(self.0);
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
    let (class, message) = m.set_up().unwrap_err();
    assert_eq!(class, KCSI_CLASS_TRANSIENT, "{message}");
    assert!(
        message.starts_with("kubernetes.io/csi: mounter.SetUpAt failed to fetch publishContext: "),
        "{message}"
    );

    f.attach(&handle, json!({"device": "/dev/fake"}));
    // A secret that does not exist: transient.
    let missing = f.mounter(&f.pv_spec("pv-api", &handle, Some("no-such-secret")));
    let (class, message) = missing.set_up().unwrap_err();
    assert_eq!(class, KCSI_CLASS_TRANSIENT, "{message}");
    assert!(
        message.starts_with("fetching NodePublishSecretRef default/no-such-secret failed: "),
        "{message}"
    );

    set_log_capture(true);
    let result = m.set_up();
    set_log_capture(false);
    result.unwrap();
    let req = f.last_publish();
    assert_eq!(req["publish_context"], json!({"device": "/dev/fake"}));
    assert_eq!(
        req["secrets"], "***stripped***",
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
    m.set_up().unwrap();
    let req = f.last_publish();
    assert_eq!(
        req["volume_context"],
        json!({"foo": "bar"}),
        "no tokens in the volume context"
    );
    assert_eq!(
        req["secrets"], "***stripped***",
        "the tokens went into the secrets"
    );
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
    let (class, message) = f
        .mounter(&inline("no-such-inline-secret"))
        .set_up()
        .unwrap_err();
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
    f.mounter(&inline("inline-secret-1")).set_up().unwrap();
    let req = f.last_publish();
    assert_eq!(req["secrets"], "***stripped***");
    assert_eq!(
        req["volume_context"]["csi.storage.k8s.io/ephemeral"],
        "true"
    );
    f.tear_down("eph");
}
