//! Helpers for the tests against a real API server: an admin client, unique node names, and
//! creating/reading the objects the node info manager works on.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kcsi::kube::client::ApiClient;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::ApiServer;

/// Runs `fut` on kcsi's runtime (where kcsi's and the test's clients live).
pub fn run<F: std::future::Future>(fut: F) -> F::Output {
    kcsi::runtime::block_on(fut).expect("kcsi runtime")
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
pub fn create_csinode(c: &ApiClient, name: &str, uid: &str, drivers: serde_json::Value) -> CSINode {
    let csinode: CSINode = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}]},
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
