//! A real kube-apiserver on etcd for the tests that need one, and its admin-side helpers: an
//! admin client, unique node names, and the objects the node info manager works on.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kcsi::ApiClient;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::json;

use crate::{repo, short_tempdir};

/// Runs `fut` on kcsi's runtime (where kcsi's and the test's clients live).
pub fn run<F>(fut: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send + 'static,
{
    kcsi::block_on(move || fut).expect("kcsi runtime")
}

/// An API object the tests write with [`run`] from any thread.
pub trait Object:
    Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static
{
}

impl<K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static> Object
    for K
{
}

/// Creates `obj` (JSON of a `K`) with the admin client `api`; panics on failure.
pub fn create<K: Object>(api: Api<K>, obj: serde_json::Value) -> K {
    let obj: K = serde_json::from_value(obj).unwrap();
    run(api.create(&PostParams::default(), &obj)).expect("create object")
}

/// An admin client for the shared API server.
pub fn admin() -> ApiClient {
    let api = ApiServer::shared();
    run(async { ApiClient::from_kubeconfig(&api.kubeconfig) }).expect("admin client")
}

/// A node name no other test of this process uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn nodes(c: &ApiClient) -> Api<Node> {
    Api::all(c.client.clone())
}

pub fn csinodes(c: &ApiClient) -> Api<CSINode> {
    Api::all(c.client.clone())
}

/// Creates a Node with these labels and annotations and, if given, status capacity and
/// allocatable (set through the status subresource).
pub fn create_node(
    c: &ApiClient,
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    resources: &[(&str, &str)],
) -> Node {
    run(async {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": map(labels), "annotations": map(annotations)}
        }))
        .unwrap();
        let created = nodes(c)
            .create(&PostParams::default(), &node)
            .await
            .expect("create Node");
        if resources.is_empty() {
            return created;
        }
        let r: BTreeMap<String, Quantity> = resources
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect();
        let patch = json!({"status": {"capacity": r, "allocatable": r}});
        nodes(c)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("set Node status")
    })
}

pub fn get_node(c: &ApiClient, name: &str) -> Node {
    run(nodes(c).get(name)).expect("get Node")
}

pub fn delete_node(c: &ApiClient, name: &str) {
    run(nodes(c).delete(name, &DeleteParams::default())).expect("delete Node");
}

pub fn get_csinode(c: &ApiClient, name: &str) -> Option<CSINode> {
    run(csinodes(c).get_opt(name)).expect("get CSINode")
}

/// Creates a CSINode owned by Node `name` (UID `uid`) with these drivers
/// (`[name, nodeID, topologyKeys?, count?]` JSON objects).
/// Creates a CSINode owned by Node `name` with UID `uid` (empty: no owner reference).
pub fn create_csinode(c: &ApiClient, name: &str, uid: &str, drivers: serde_json::Value) -> CSINode {
    let owners = if uid.is_empty() {
        json!([])
    } else {
        json!([{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}])
    };
    let csinode: CSINode = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owners},
        "spec": {"drivers": drivers}
    }))
    .unwrap();
    run(csinodes(c).create(&PostParams::default(), &csinode)).expect("create CSINode")
}

pub fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

pub fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// The drivers of a CSINode as compact JSON, for exact comparisons.
pub fn drivers_json(csinode: &CSINode) -> serde_json::Value {
    serde_json::to_value(&csinode.spec.drivers).unwrap()
}

/// A real kube-apiserver on etcd (scripts/peers/apiserver.sh), one per test binary: started on
/// first use, stopped when the test process exits. Tests sharing it use unique node names.
pub struct ApiServer {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
}

static API_SERVER: std::sync::OnceLock<ApiServer> = std::sync::OnceLock::new();

extern "C" fn stop_api_server_at_exit() {
    if let Some(api) = API_SERVER.get() {
        let _ = api.script("stop");
        let _ = std::fs::remove_dir_all(&api.dir);
    }
}

impl ApiServer {
    pub fn shared() -> &'static ApiServer {
        API_SERVER.get_or_init(|| {
            let dir = short_tempdir("kcsi-api").keep();
            let api = ApiServer {
                kubeconfig: dir.join("kubeconfig"),
                dir,
            };
            // libtest ends with exit(), which runs atexit handlers, also after failed tests.
            unsafe { libc::atexit(stop_api_server_at_exit) };
            // A watchdog stops it too if this process dies without running atexit (SIGKILL).
            let watchdog = format!(
                "while kill -0 {pid} 2>/dev/null; do sleep 1; done; bash {script} stop {dir} >/dev/null 2>&1; rm -rf {dir}",
                pid = std::process::id(),
                script = repo().join("scripts/peers/apiserver.sh").display(),
                dir = api.dir.display()
            );
            // Started in the background by a shell that exits at once, so it is not our child.
            Command::new("bash")
                .args(["-c", &format!("setsid bash -c '{watchdog}' </dev/null >/dev/null 2>&1 &")])
                .status()
                .expect("start the API server watchdog");
            let out = api.script("start");
            assert!(
                out.status.success(),
                "apiserver.sh start failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            api
        })
    }

    fn script(&self, cmd: &str) -> std::process::Output {
        Command::new("bash")
            .arg(repo().join("scripts/peers/apiserver.sh"))
            .arg(cmd)
            .arg(&self.dir)
            // Every request's metadata (verb, resource, user agent) in dir/audit.log.
            .env("KCSI_APISERVER_AUDIT", "1")
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/peers/apiserver.sh")
    }

    /// The audit log's events so far (metadata of every request), one JSON object each.
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// A kubeconfig in `dir` whose requests the API server runs as user `user` (the admin
    /// impersonating it, in group system:masters), so the audit log tells that client's
    /// requests from all others ([`ApiServer::audit_events_as`]).
    pub fn kubeconfig_as(&self, dir: &Path, user: &str) -> PathBuf {
        let mut kubeconfig =
            kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read the kubeconfig");
        for named in &mut kubeconfig.auth_infos {
            let auth = named.auth_info.as_mut().expect("the kubeconfig's user");
            auth.impersonate = Some(user.to_string());
            auth.impersonate_groups = Some(vec!["system:masters".to_string()]);
        }
        let path = dir.join(format!("kubeconfig-{user}"));
        // JSON is YAML: any kubeconfig reader takes it.
        std::fs::write(&path, serde_json::to_string(&kubeconfig).unwrap())
            .expect("write the kubeconfig");
        path
    }

    /// The audit events of the requests made as `user` through [`ApiServer::kubeconfig_as`].
    pub fn audit_events_as(&self, user: &str) -> Vec<serde_json::Value> {
        let mut events = self.audit_events();
        events.retain(|e| e["impersonatedUser"]["username"] == user);
        events
    }

    /// Stops only kube-apiserver (etcd and the port stay), as an outage.
    pub fn stop_apiserver(&self) {
        let out = self.script("stop-apiserver");
        assert!(
            out.status.success(),
            "stop-apiserver: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn start_apiserver(&self) {
        let out = self.script("start-apiserver");
        assert!(
            out.status.success(),
            "start-apiserver: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A kcsi host config for `node` using this API server (the typed one).
    pub fn node_config(&self, root: &Path, node: &str) -> kcsi::HostConfig {
        kcsi::HostConfig {
            kubeconfig: Some(self.kubeconfig.clone()),
            ..kcsi::HostConfig::node(node, root)
        }
    }

    /// A kcsi host config for `node` using this API server, as `kcsi_host_new` takes it.
    pub fn host_config(&self, root: &Path, node: &str) -> String {
        serde_json::json!({"nodeName": node, "rootDir": root, "kubeconfig": self.kubeconfig})
            .to_string()
    }
}
