//! Upstream's node info manager (`pkg/volume/csi/nodeinfomanager`): publishes registered
//! drivers on the Node (node-ID annotation, topology labels) and the CSINode object, removes
//! them again on deregistration, and initialises the CSINode at start-up.
//!
//! Writes use optimistic concurrency: the Node PATCH carries the resourceVersion that was read
//! and the CSINode is replaced with it, so a concurrent writer makes the API server answer 409
//! Conflict (retried) instead of one update silently winning.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ::kube::api::{DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use ::kube::Api;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{json, Map, Value};

use super::backoff;
use super::client::{call, ApiClient, ApiError};
use crate::config::HostConfig;
use crate::error::{Error, ErrorKind, Result};

pub const ANNOTATION_NODE_ID: &str = "csi.volume.kubernetes.io/nodeid";
pub const ANNOTATION_MIGRATED_PLUGINS: &str = "storage.alpha.kubernetes.io/migrated-plugins";
const ATTACH_LIMIT_PREFIX: &str = "attachable-volumes-csi-";
const RESOURCE_NAME_LENGTH_LIMIT: usize = 63;

/// In-tree plugins whose CSI migration is on: always these (their gates are GA and locked on).
const ALWAYS_MIGRATED: &[&str] = &[
    "kubernetes.io/aws-ebs",
    "kubernetes.io/azure-disk",
    "kubernetes.io/azure-file",
    "kubernetes.io/cinder",
    "kubernetes.io/gce-pd",
    "kubernetes.io/vsphere-volume",
];
const PORTWORX: &str = "kubernetes.io/portworx-volume";

/// The migrated-plugins set for a host's feature gates.
pub fn migrated_plugins(config: &HostConfig) -> BTreeSet<String> {
    let mut set: BTreeSet<String> = ALWAYS_MIGRATED.iter().map(|s| s.to_string()).collect();
    if config.gate("CSIMigrationPortworx") {
        set.insert(PORTWORX.to_string());
    }
    set
}

pub struct NodeInfoManager {
    api: ApiClient,
    node_name: String,
    migrated_plugins: BTreeSet<String>,
    timeout: Duration,
    /// Upstream's `nim.lock`: one read-modify-write of this node's objects at a time.
    lock: tokio::sync::Mutex<()>,
}

/// What a Node edit returns: whether it changed anything.
type NodeEdit<'a> = &'a (dyn Fn(&mut Node) -> Result<bool> + Sync);

impl NodeInfoManager {
    pub fn new(
        api: ApiClient,
        node_name: &str,
        migrated_plugins: BTreeSet<String>,
        timeout: Duration,
    ) -> NodeInfoManager {
        NodeInfoManager {
            api,
            node_name: node_name.to_string(),
            migrated_plugins,
            timeout,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.api.client.clone())
    }

    fn csinodes(&self) -> Api<CSINode> {
        Api::all(self.api.client.clone())
    }

    /// `InstallCSIDriver`.
    pub async fn install(
        &self,
        driver: &str,
        node_id: &str,
        max_attach_limit: i64,
        topology: Option<&BTreeMap<String, String>>,
    ) -> Result<()> {
        if node_id.is_empty() {
            return Err(Error::invalid(
                "error adding CSI driver node info: driverNodeID must not be empty",
            ));
        }
        let empty = BTreeMap::new();
        let topology = topology.unwrap_or(&empty);
        let edit = |node: &mut Node| -> Result<bool> {
            let a = remove_max_attach_limit(node, driver);
            let b = update_node_id(node, driver, node_id)?;
            let c = update_topology_labels(node, topology)?;
            Ok(a || b || c)
        };
        let node_uid = self
            .update_node(&edit)
            .await
            .map_err(|e| e.context("error updating Node object with CSI driver node info"))?;
        backoff::UPDATE
            .retry(|| {
                self.try_install_to_csinode(&node_uid, driver, node_id, max_attach_limit, topology)
            })
            .await
            .map_err(|errs| {
                backoff::exhausted("error updating CSINode", errs)
                    .context("error updating CSINode object with CSI driver node info")
            })
    }

    /// `UpdateCSIDriver`: only the CSINode part of [`Self::install`] (the allocatable updater
    /// refreshes `allocatable.count` with it).
    pub async fn update(
        &self,
        driver: &str,
        node_id: &str,
        max_attach_limit: i64,
        topology: Option<&BTreeMap<String, String>>,
    ) -> Result<()> {
        let empty = BTreeMap::new();
        let topology = topology.unwrap_or(&empty);
        backoff::UPDATE
            .retry(|| async {
                let node_uid = self.node_uid().await?;
                self.try_install_to_csinode(&node_uid, driver, node_id, max_attach_limit, topology)
                    .await
            })
            .await
            .map_err(|errs| {
                backoff::exhausted("error updating CSINode", errs)
                    .context("error updating CSINode object with CSI driver node info")
            })
    }

    /// `UninstallCSIDriver`: the CSINode entry and the node-ID annotation key go; topology
    /// labels and the (possibly empty) CSINode stay, as upstream.
    pub async fn uninstall(&self, driver: &str) -> Result<()> {
        backoff::UPDATE
            .retry(|| self.try_uninstall_from_csinode(driver))
            .await
            .map_err(|errs| {
                backoff::exhausted("error updating CSINode", errs)
                    .prefix("error uninstalling CSI driver from CSINode object ")
            })?;
        let edit = |node: &mut Node| -> Result<bool> {
            let a = remove_max_attach_limit(node, driver);
            let b = remove_node_id(node, driver)?;
            Ok(a || b)
        };
        self.update_node(&edit)
            .await
            .map(|_| ())
            .map_err(|e| e.prefix("error removing CSI driver node info from Node object "))
    }

    /// `InitializeCSINodeWithAnnotation`: create the CSINode (owned by the Node) or bring its
    /// migrated-plugins annotation up to date.
    pub async fn initialize_csinode(&self) -> Result<()> {
        backoff::UPDATE
            .retry(|| self.try_initialize_csinode())
            .await
            .map_err(|errs| {
                // Upstream reports only the last failure here, not the aggregate.
                let last = errs
                    .into_iter()
                    .last()
                    .map_or_else(|| Error::internal("no attempt was made"), |e| e.error);
                last.prefix(format!(
                    "error updating CSINode annotation: {}; caused by: ",
                    backoff::WAIT_TIMEOUT
                ))
            })
    }

    /// Upstream's `waitForAPIServerForever` probe: a cheap GET of the CSINode from the API
    /// server's cache (`resourceVersion=0`); found or not found both mean "reachable".
    pub async fn api_server_reachable(&self) -> Result<()> {
        let action = format!("get CSINode {}", self.node_name);
        match call(
            self.timeout,
            &action,
            self.csinodes().get_with(&self.node_name, &GetParams::any()),
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.error),
        }
    }

    /// `updateNode`: read-modify-PATCH the Node with backoff; returns the Node's UID.
    async fn update_node(&self, edit: NodeEdit<'_>) -> Result<String> {
        backoff::UPDATE
            .retry(|| self.try_update_node(edit))
            .await
            .map_err(|errs| backoff::exhausted("error updating node", errs))
    }

    async fn try_update_node(&self, edit: NodeEdit<'_>) -> Result<String, ApiError> {
        let _guard = self.lock.lock().await;
        let nodes = self.nodes();
        let what = format!("Node {}", self.node_name);
        let original = call(
            self.timeout,
            &format!("get {what}"),
            nodes.get(&self.node_name),
        )
        .await?;
        let mut node = original.clone();
        if edit(&mut node).map_err(ApiError::local)? {
            let patch = node_patch(&original, &node);
            call(
                self.timeout,
                &format!("patch {what}"),
                nodes.patch_status(
                    &self.node_name,
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                ),
            )
            .await?;
        }
        Ok(original.metadata.uid.unwrap_or_default())
    }

    async fn get_csinode(&self) -> Result<Option<CSINode>, ApiError> {
        match call(
            self.timeout,
            &format!("get CSINode {}", self.node_name),
            self.csinodes().get(&self.node_name),
        )
        .await
        {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn node_uid(&self) -> Result<String, ApiError> {
        let node = call(
            self.timeout,
            &format!("get Node {}", self.node_name),
            self.nodes().get(&self.node_name),
        )
        .await?;
        Ok(node.metadata.uid.unwrap_or_default())
    }

    /// `CreateCSINode`: an empty CSINode owned by the Node, with the migration annotation.
    async fn create_csinode(&self, node_uid: &str) -> Result<CSINode, ApiError> {
        let mut csinode = CSINode {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: self.node_name.clone(),
                    uid: node_uid.to_string(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: CSINodeSpec {
                drivers: Vec::new(),
            },
        };
        set_migration_annotation(Some(&self.migrated_plugins), &mut csinode);
        call(
            self.timeout,
            &format!("create CSINode {}", self.node_name),
            self.csinodes().create(&PostParams::default(), &csinode),
        )
        .await
    }

    /// The CSINode to write to: the existing one if the current Node owns it, else a new one.
    /// A CSINode the current Node does not own (an earlier Node of the same name, or no Node
    /// owner reference at all) is deleted and this try fails, so the next one creates it
    /// afresh (upstream `ensureNodeOwnsCSINode`): updating it would be lost when the garbage
    /// collector removes it for its dead owner, or never be collected with its Node.
    async fn owned_csinode(&self, node_uid: &str) -> Result<CSINode, ApiError> {
        let Some(csinode) = self.get_csinode().await? else {
            return self.create_csinode(node_uid).await;
        };
        let Some(stale) = unowned(&csinode, &self.node_name, node_uid) else {
            return Ok(csinode);
        };
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: csinode.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        let action = format!("delete CSINode {}", self.node_name);
        match call(
            self.timeout,
            &action,
            self.csinodes().delete(&self.node_name, &dp),
        )
        .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        Err(ApiError::local(Error::new(
            ErrorKind::Kubernetes,
            format!(
                "CSINode {} was owned by different node (oldNodeID={}, newNodeID={}), deleted it",
                crate::goquote::quote(&self.node_name),
                crate::goquote::quote(&stale),
                crate::goquote::quote(node_uid)
            ),
        )))
    }

    async fn try_install_to_csinode(
        &self,
        node_uid: &str,
        driver: &str,
        node_id: &str,
        max_attach_limit: i64,
        topology: &BTreeMap<String, String>,
    ) -> Result<(), ApiError> {
        let _guard = self.lock.lock().await;
        let mut csinode = self.owned_csinode(node_uid).await?;
        if entry_identity_changed(&csinode, driver, node_id, topology) {
            // The API server refuses to change an entry's nodeID or topologyKeys in place
            // (upstream's fake client in its unit tests does not), so the old entry goes first.
            uninstall_driver(&mut csinode, driver);
            csinode = self.replace_csinode(&csinode).await?;
        }
        let spec_modified =
            install_driver(&mut csinode, driver, node_id, max_attach_limit, topology);
        let annotation_modified =
            set_migration_annotation(Some(&self.migrated_plugins), &mut csinode);
        if spec_modified || annotation_modified {
            self.replace_csinode(&csinode).await?;
        }
        Ok(())
    }

    async fn try_uninstall_from_csinode(&self, driver: &str) -> Result<(), ApiError> {
        let _guard = self.lock.lock().await;
        let Some(mut csinode) = self.get_csinode().await? else {
            return Ok(());
        };
        if uninstall_driver(&mut csinode, driver) {
            self.replace_csinode(&csinode).await?;
        }
        Ok(())
    }

    async fn try_initialize_csinode(&self) -> Result<(), ApiError> {
        let _guard = self.lock.lock().await;
        let node_uid = self.node_uid().await?;
        let mut csinode = self.owned_csinode(&node_uid).await?;
        if set_migration_annotation(Some(&self.migrated_plugins), &mut csinode) {
            self.replace_csinode(&csinode).await?;
        }
        Ok(())
    }

    /// UPDATE with the resourceVersion that was read (409 Conflict if it changed meanwhile).
    async fn replace_csinode(&self, csinode: &CSINode) -> Result<CSINode, ApiError> {
        call(
            self.timeout,
            &format!("update CSINode {}", self.node_name),
            self.csinodes()
                .replace(&self.node_name, &PostParams::default(), csinode),
        )
        .await
    }
}

/// `GetCSIAttachLimitKey`.
pub fn attach_limit_key(driver: &str) -> String {
    if ATTACH_LIMIT_PREFIX.len() + driver.len() < RESOURCE_NAME_LENGTH_LIMIT {
        return format!("{ATTACH_LIMIT_PREFIX}{driver}");
    }
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, driver.as_bytes());
    let hash = hex::encode(digest.as_ref());
    // Go slices the first 23 bytes; driver names are ASCII in practice.
    let keep = String::from_utf8_lossy(&driver.as_bytes()[..23]);
    format!("{ATTACH_LIMIT_PREFIX}{keep}{}", &hash[..16])
}

/// `removeMaxAttachLimit`: drops the legacy per-driver attach limit from the Node's status.
pub fn remove_max_attach_limit(node: &mut Node, driver: &str) -> bool {
    let key = attach_limit_key(driver);
    let Some(status) = node.status.as_mut() else {
        return false;
    };
    let mut changed = false;
    for map in [&mut status.capacity, &mut status.allocatable] {
        if let Some(m) = map {
            changed |= m.remove(&key).is_some();
            if m.is_empty() {
                *map = None;
            }
        }
    }
    changed
}

fn node_id_map(node: &Node) -> Result<BTreeMap<String, String>> {
    let value = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_NODE_ID))
        .map(String::as_str)
        .unwrap_or("");
    if value.is_empty() {
        return Ok(BTreeMap::new());
    }
    // Go's json.Unmarshal into a nil map accepts "null" too.
    serde_json::from_str::<Option<BTreeMap<String, String>>>(value)
        .map(Option::unwrap_or_default)
        .map_err(|e| {
            Error::new(
                ErrorKind::Kubernetes,
                format!(
                    "failed to parse node's {ANNOTATION_NODE_ID:?} annotation value ({}) err={e}",
                    crate::goquote::quote(value)
                ),
            )
        })
}

/// `updateNodeIDInNode`. The map is a `BTreeMap`, so it serialises like Go's `json.Marshal`:
/// sorted keys, no spaces.
pub fn update_node_id(node: &mut Node, driver: &str, node_id: &str) -> Result<bool> {
    let mut map = node_id_map(node)?;
    if map.get(driver).map(String::as_str) == Some(node_id) {
        return Ok(false);
    }
    map.insert(driver.to_string(), node_id.to_string());
    let value = go_json(&map);
    node.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ANNOTATION_NODE_ID.to_string(), value);
    Ok(true)
}

/// `removeNodeIDFromNode`: the whole annotation goes with the last driver.
pub fn remove_node_id(node: &mut Node, driver: &str) -> Result<bool> {
    let mut map = node_id_map(node)?;
    if map.remove(driver).is_none() {
        return Ok(false);
    }
    let annotations = node.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if map.is_empty() {
        annotations.remove(ANNOTATION_NODE_ID);
    } else {
        annotations.insert(ANNOTATION_NODE_ID.to_string(), go_json(&map));
    }
    Ok(true)
}

/// Go's `json.Marshal` of a string map: like serde_json's compact form, except that Go
/// escapes `<`, `>` and `&` (HTML safety), which a byte-for-byte equal annotation needs.
fn go_json(map: &BTreeMap<String, String>) -> String {
    serde_json::to_string(map)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// `updateTopologyLabels`: labels are only ever added; a different existing value is an error.
pub fn update_topology_labels(
    node: &mut Node,
    topology: &BTreeMap<String, String>,
) -> Result<bool> {
    if topology.is_empty() {
        return Ok(false);
    }
    let labels = node.metadata.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in topology {
        if let Some(current) = labels.get(k).filter(|c| *c != v) {
            use crate::goquote::quote;
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "detected topology value collision: driver reported {}:{} but existing label is {}:{}",
                    quote(k),
                    quote(v),
                    quote(k),
                    quote(current)
                ),
            ));
        }
    }
    let mut changed = false;
    for (k, v) in topology {
        changed |= labels.insert(k.clone(), v.clone()).as_ref() != Some(v);
    }
    // Upstream reports an update whenever topology is non-empty; an unchanged Node needs no
    // PATCH, which saves a request and bumps no resourceVersion.
    Ok(changed)
}

/// `installDriverToCSINode`'s spec part: the driver's entry, replaced at the end of the list.
/// Returns false when the entry is already as wanted.
pub fn install_driver(
    csinode: &mut CSINode,
    driver: &str,
    node_id: &str,
    max_attach_limit: i64,
    topology: &BTreeMap<String, String>,
) -> bool {
    let keys: Vec<String> = topology.keys().cloned().collect();
    let count = if max_attach_limit > 0 {
        if max_attach_limit > i32::MAX as i64 {
            tracing::warn!(
                "Exceeded max supported attach limit value, truncating it to {}",
                i32::MAX
            );
        }
        Some(max_attach_limit.min(i32::MAX as i64) as i32)
    } else {
        if max_attach_limit < 0 {
            tracing::error!("Invalid attach limit value {max_attach_limit} cannot be added to CSINode object for {driver:?}");
        }
        None
    };
    let drivers = &mut csinode.spec.drivers;
    let unchanged = drivers.iter().any(|d| {
        d.name == driver
            && d.node_id == node_id
            && same_keys(d, topology)
            && d.allocatable.as_ref().and_then(|a| a.count) == count
    });
    if unchanged {
        return false;
    }
    drivers.retain(|d| d.name != driver);
    drivers.push(CSINodeDriver {
        name: driver.to_string(),
        node_id: node_id.to_string(),
        topology_keys: if keys.is_empty() { None } else { Some(keys) },
        allocatable: count.map(|c| VolumeNodeResources { count: Some(c) }),
    });
    true
}

fn same_keys(entry: &CSINodeDriver, topology: &BTreeMap<String, String>) -> bool {
    let keys: BTreeSet<&String> = entry
        .topology_keys
        .as_deref()
        .unwrap_or_default()
        .iter()
        .collect();
    keys == topology.keys().collect()
}

/// Whether `driver` has an entry whose immutable fields (nodeID, topologyKeys) differ.
fn entry_identity_changed(
    csinode: &CSINode,
    driver: &str,
    node_id: &str,
    topology: &BTreeMap<String, String>,
) -> bool {
    csinode
        .spec
        .drivers
        .iter()
        .any(|d| d.name == driver && (d.node_id != node_id || !same_keys(d, topology)))
}

/// `uninstallDriverFromCSINode`'s spec part.
pub fn uninstall_driver(csinode: &mut CSINode, driver: &str) -> bool {
    let before = csinode.spec.drivers.len();
    csinode.spec.drivers.retain(|d| d.name != driver);
    csinode.spec.drivers.len() != before
}

/// `setMigrationAnnotation`: `None` never touches the annotation; an empty set removes it.
pub fn set_migration_annotation(
    migrated: Option<&BTreeSet<String>>,
    csinode: &mut CSINode,
) -> bool {
    let Some(wanted) = migrated else { return false };
    let annotations = csinode
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    let current: BTreeSet<String> = match annotations.get(ANNOTATION_MIGRATED_PLUGINS) {
        Some(v) if !v.is_empty() => v.split(',').map(str::to_string).collect(),
        _ => BTreeSet::new(),
    };
    if current == *wanted {
        return false;
    }
    if wanted.is_empty() {
        annotations.remove(ANNOTATION_MIGRATED_PLUGINS);
    } else {
        let list: Vec<&str> = wanted.iter().map(String::as_str).collect();
        annotations.insert(ANNOTATION_MIGRATED_PLUGINS.to_string(), list.join(","));
    }
    true
}

/// Upstream `nodeOwnsCSINode` inverted: `None` when a Node owner reference names `node` with
/// `node_uid`; else the UID of the last Node owner reference (empty when there is none).
fn unowned(csinode: &CSINode, node: &str, node_uid: &str) -> Option<String> {
    let mut owner = String::new();
    for o in csinode.metadata.owner_references.iter().flatten() {
        if o.kind != "Node" {
            continue;
        }
        owner.clone_from(&o.uid);
        if o.name == node && o.uid == node_uid {
            return None;
        }
    }
    Some(owner)
}

/// The strategic-merge patch from `original` to `modified` (annotations, labels and the
/// status resource maps; removed keys as `null`), pinned to the resourceVersion that was read.
fn node_patch(original: &Node, modified: &Node) -> Value {
    let mut metadata = Map::new();
    metadata.insert(
        "resourceVersion".into(),
        json!(original.metadata.resource_version),
    );
    if let Some(d) = map_diff(
        original.metadata.annotations.as_ref(),
        modified.metadata.annotations.as_ref(),
    ) {
        metadata.insert("annotations".into(), d);
    }
    if let Some(d) = map_diff(
        original.metadata.labels.as_ref(),
        modified.metadata.labels.as_ref(),
    ) {
        metadata.insert("labels".into(), d);
    }
    let mut patch = Map::new();
    patch.insert("metadata".into(), Value::Object(metadata));
    let (old, new) = (
        original.status.clone().unwrap_or_default(),
        modified.status.clone().unwrap_or_default(),
    );
    let mut status = Map::new();
    if let Some(d) = map_diff(old.capacity.as_ref(), new.capacity.as_ref()) {
        status.insert("capacity".into(), d);
    }
    if let Some(d) = map_diff(old.allocatable.as_ref(), new.allocatable.as_ref()) {
        status.insert("allocatable".into(), d);
    }
    if !status.is_empty() {
        patch.insert("status".into(), Value::Object(status));
    }
    Value::Object(patch)
}

fn map_diff<V: serde::Serialize + PartialEq>(
    old: Option<&BTreeMap<String, V>>,
    new: Option<&BTreeMap<String, V>>,
) -> Option<Value> {
    let empty = BTreeMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let mut diff = Map::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            diff.insert(k.clone(), json!(v));
        }
    }
    for k in old.keys().filter(|k| !new.contains_key(*k)) {
        diff.insert(k.clone(), Value::Null);
    }
    (!diff.is_empty()).then_some(Value::Object(diff))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csinode_with_annotation(value: Option<&str>) -> CSINode {
        let mut c = CSINode::default();
        if let Some(v) = value {
            c.metadata.annotations =
                Some([(ANNOTATION_MIGRATED_PLUGINS.to_string(), v.to_string())].into());
        }
        c
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn attach_limit_key_hashes_long_driver_names() {
        assert_eq!(
            attach_limit_key("com.example.csi/driver1"),
            "attachable-volumes-csi-com.example.csi/driver1"
        );
        let long = "a".repeat(40);
        let key = attach_limit_key(&long);
        assert_eq!(key.len(), 23 + 23 + 16);
        assert!(key.starts_with(&format!("attachable-volumes-csi-{}", "a".repeat(23))));
    }

    #[test]
    fn migration_annotation_nil_plugins_leave_it_unchanged() {
        let mut c = csinode_with_annotation(Some("x"));
        assert!(!set_migration_annotation(None, &mut c));
        assert_eq!(
            c.metadata.annotations.unwrap()[ANNOTATION_MIGRATED_PLUGINS],
            "x"
        );
    }

    #[test]
    fn migration_annotation_sorted_and_only_modified_when_the_set_differs() {
        let mut c = csinode_with_annotation(None);
        assert!(set_migration_annotation(
            Some(&set(&["test", "foo"])),
            &mut c
        ));
        assert_eq!(
            c.metadata.annotations.as_ref().unwrap()[ANNOTATION_MIGRATED_PLUGINS],
            "foo,test"
        );
        assert!(!set_migration_annotation(
            Some(&set(&["foo", "test"])),
            &mut c
        ));
        let mut other = csinode_with_annotation(Some("test"));
        other
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("other".into(), "keep".into());
        assert!(set_migration_annotation(Some(&set(&[])), &mut other));
        let a = other.metadata.annotations.unwrap();
        assert!(!a.contains_key(ANNOTATION_MIGRATED_PLUGINS));
        assert_eq!(a["other"], "keep");
    }

    #[test]
    fn node_id_annotation_is_go_compact_json_with_sorted_keys() {
        let mut n = Node::default();
        assert!(update_node_id(&mut n, "z.csi", "n1").unwrap());
        assert!(update_node_id(&mut n, "a.csi", "n<2>").unwrap());
        assert_eq!(
            n.metadata.annotations.unwrap()[ANNOTATION_NODE_ID],
            r#"{"a.csi":"n\u003c2\u003e","z.csi":"n1"}"#
        );
    }

    #[test]
    fn node_patch_nulls_removed_keys_and_pins_the_resource_version() {
        let mut a = Node::default();
        a.metadata.resource_version = Some("7".into());
        a.metadata.annotations = Some([("k".to_string(), "v".to_string())].into());
        let mut b = a.clone();
        b.metadata.annotations = Some(BTreeMap::new());
        b.metadata.labels = Some([("l".to_string(), "1".to_string())].into());
        assert_eq!(
            node_patch(&a, &b),
            json!({"metadata": {"resourceVersion": "7", "annotations": {"k": null}, "labels": {"l": "1"}}})
        );
    }
}
