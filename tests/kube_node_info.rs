//! The node info manager against a real kube-apiserver: the cases of upstream
//! pkg/volume/csi/nodeinfomanager/nodeinfomanager_test.go, each on its own Node, driven
//! directly.

use kcsi_testkit as common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kcsi::ErrorKind;
use kcsi::{migrated_plugins, NodeInfoManager, ANNOTATION_MIGRATED_PLUGINS, ANNOTATION_NODE_ID};
use serde_json::json;

use common::apiserver::*;

const DRIVER: &str = "com.example.csi.driver1";
const NODE_ID: &str = "com.example.csi/csi-node1";
const ZONE: &str = "com.example.csi/zone";
const RACK: &str = "com.example.csi/rack";
const OTHER: &str = "net.example.storage.other-driver";
/// What kube-apiserver v1.36.3's kubelet writes: every in-tree plugin upstream migrates,
/// Portworx included (pkg/volume/csi/csi_plugin.go Init).
const MIGRATED: &str = "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume";

fn manager(node: &str) -> NodeInfoManager {
    let config = kcsi::HostConfig::node(node, "/tmp").check().unwrap();
    NodeInfoManager::new(
        admin(),
        node,
        migrated_plugins(&config),
        Duration::from_secs(30),
    )
}

fn install(node: &str, limit: i64, topology: Option<BTreeMap<String, String>>) -> kcsi::Result<()> {
    run(manager(node).install(DRIVER, NODE_ID, limit, topology.as_ref()))
}

fn zone_a() -> Option<BTreeMap<String, String>> {
    Some(map(&[(ZONE, "zoneA")]))
}

#[test]
fn install_on_empty_node_publishes_annotation_label_and_owned_csinode() {
    let c = admin();
    let name = unique("ni-empty");
    let node = create_node(&c, &name, &[], &[], &[]);
    install(&name, 0, zone_a()).unwrap();

    let after = get_node(&c, &name);
    assert_eq!(
        annotation(&after, ANNOTATION_NODE_ID),
        Some(r#"{"com.example.csi.driver1":"com.example.csi/csi-node1"}"#)
    );
    assert_eq!(labels(&after).get(ZONE).map(String::as_str), Some("zoneA"));
    let csinode = get_csinode(&c, &name).expect("CSINode created");
    assert_eq!(
        drivers_json(&csinode),
        json!([{"name": DRIVER, "nodeID": NODE_ID, "topologyKeys": [ZONE]}])
    );
    let owner = &csinode.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str()
        ),
        ("v1", "Node", name.as_str())
    );
    assert_eq!(Some(&owner.uid), node.metadata.uid.as_ref());
    assert_eq!(
        csinode.metadata.annotations.unwrap()[ANNOTATION_MIGRATED_PLUGINS],
        MIGRATED
    );
}

#[test]
fn kcsi_requests_carry_a_kcsi_user_agent() {
    let c = admin();
    let name = unique("ni-agent");
    create_node(&c, &name, &[], &[], &[]);
    install(&name, 0, None).unwrap();
    let agents: Vec<String> = ApiServer::shared()
        .audit_events()
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "csinodes" && e["objectRef"]["name"] == name.as_str()
        })
        .map(|e| e["userAgent"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(!agents.is_empty(), "no audited CSINode request for {name}");
    let want = format!("kcsi/{}", env!("CARGO_PKG_VERSION"));
    assert!(
        agents.iter().all(|a| *a == want),
        "user agents {agents:?}, want {want}"
    );
}

#[test]
fn install_is_idempotent_for_the_same_driver_and_writes_nothing() {
    for topology in [zone_a(), None] {
        let c = admin();
        let name = unique("ni-same");
        install_fixture(&c, &name, topology.clone());
        let node_rv = get_node(&c, &name).metadata.resource_version;
        let csinode_rv = get_csinode(&c, &name).unwrap().metadata.resource_version;

        install(&name, 0, topology.clone()).unwrap();

        let node = get_node(&c, &name);
        assert_eq!(
            node.metadata.resource_version, node_rv,
            "Node must not be written"
        );
        let csinode = get_csinode(&c, &name).unwrap();
        assert_eq!(
            csinode.metadata.resource_version, csinode_rv,
            "CSINode must not be written"
        );
        assert!(csinode.spec.drivers[0].allocatable.is_none());
    }
}

/// A Node and CSINode as a previous registration of DRIVER left them.
fn install_fixture(c: &kcsi::ApiClient, name: &str, topology: Option<BTreeMap<String, String>>) {
    create_node(c, name, &[], &[], &[]);
    install(name, 0, topology).unwrap();
}

#[test]
fn install_appends_after_other_drivers_and_merges_annotation_and_labels() {
    let c = admin();
    let name = unique("ni-other");
    let node = create_node(
        &c,
        &name,
        &[("net.example.storage/rack", "rack1")],
        &[(
            ANNOTATION_NODE_ID,
            r#"{"net.example.storage.other-driver":"net.example.storage/test-node"}"#,
        )],
        &[],
    );
    create_csinode(
        &c,
        &name,
        node.metadata.uid.as_deref().unwrap(),
        json!([{"name": OTHER, "nodeID": "net.example.storage/test-node", "topologyKeys": ["net.example.storage/rack"]}]),
    );

    install(&name, 0, zone_a()).unwrap();

    let after = get_node(&c, &name);
    assert_eq!(
        annotation(&after, ANNOTATION_NODE_ID),
        Some(
            r#"{"com.example.csi.driver1":"com.example.csi/csi-node1","net.example.storage.other-driver":"net.example.storage/test-node"}"#
        )
    );
    assert_eq!(
        labels(&after),
        map(&[("net.example.storage/rack", "rack1"), (ZONE, "zoneA")])
    );
    let csinode = get_csinode(&c, &name).unwrap();
    assert_eq!(
        drivers_json(&csinode),
        json!([
            {"name": OTHER, "nodeID": "net.example.storage/test-node", "topologyKeys": ["net.example.storage/rack"]},
            {"name": DRIVER, "nodeID": NODE_ID, "topologyKeys": [ZONE]}
        ])
    );
}

#[test]
fn install_refuses_a_conflicting_topology_value_with_upstreams_message() {
    let c = admin();
    let name = unique("ni-collide");
    create_node(
        &c,
        &name,
        &[(ZONE, "zoneA")],
        &[(
            ANNOTATION_NODE_ID,
            r#"{"com.example.csi.driver1":"com.example.csi/other-node"}"#,
        )],
        &[],
    );

    let err = install(&name, 0, Some(map(&[(ZONE, "other-zone")]))).unwrap_err();

    assert_eq!(
        err.message(),
        "error updating Node object with CSI driver node info: error updating node: timed out waiting for the condition; \
         caused by: detected topology value collision: driver reported \"com.example.csi/zone\":\"other-zone\" but existing label is \"com.example.csi/zone\":\"zoneA\""
    );
    let after = get_node(&c, &name);
    assert_eq!(labels(&after).get(ZONE).map(String::as_str), Some("zoneA"));
    assert_eq!(
        annotation(&after, ANNOTATION_NODE_ID),
        Some(r#"{"com.example.csi.driver1":"com.example.csi/other-node"}"#)
    );
    assert!(
        get_csinode(&c, &name).is_none(),
        "nothing written to CSINode after a Node failure"
    );
}

#[test]
fn install_with_a_new_topology_key_keeps_old_labels_and_replaces_topology_keys() {
    let c = admin();
    let name = unique("ni-rack");
    let node = create_node(
        &c,
        &name,
        &[(ZONE, "zoneA")],
        &[(
            ANNOTATION_NODE_ID,
            r#"{"com.example.csi.driver1":"com.example.csi/other-node"}"#,
        )],
        &[],
    );
    create_csinode(
        &c,
        &name,
        node.metadata.uid.as_deref().unwrap(),
        json!([{"name": DRIVER, "nodeID": "com.example.csi/other-node", "topologyKeys": [ZONE]}]),
    );

    install(&name, 0, Some(map(&[(RACK, "rack1")]))).unwrap();

    let after = get_node(&c, &name);
    assert_eq!(
        annotation(&after, ANNOTATION_NODE_ID),
        Some(r#"{"com.example.csi.driver1":"com.example.csi/csi-node1"}"#)
    );
    assert_eq!(labels(&after), map(&[(RACK, "rack1"), (ZONE, "zoneA")]));
    assert_eq!(
        drivers_json(&get_csinode(&c, &name).unwrap()),
        json!([{"name": DRIVER, "nodeID": NODE_ID, "topologyKeys": [RACK]}])
    );
}

#[test]
fn install_without_topology_adds_no_labels_and_no_topology_keys() {
    let c = admin();
    // Empty node; node with the same driver; node with another driver.
    type Pairs = &'static [(&'static str, &'static str)];
    let cases: [(Pairs, Pairs); 3] = [
        (&[], &[]),
        (
            &[(ZONE, "zoneA")],
            &[(
                ANNOTATION_NODE_ID,
                r#"{"com.example.csi.driver1":"com.example.csi/csi-node1"}"#,
            )],
        ),
        (
            &[("net.example.storage/rack", "rack1")],
            &[(
                ANNOTATION_NODE_ID,
                r#"{"net.example.storage.other-driver":"net.example.storage/test-node"}"#,
            )],
        ),
    ];
    for (node_labels, annotations) in cases {
        let name = unique("ni-notopo");
        create_node(&c, &name, node_labels, annotations, &[]);
        install(&name, 0, None).unwrap();
        let after = get_node(&c, &name);
        assert_eq!(labels(&after), map(node_labels), "labels untouched");
        let ids: BTreeMap<String, String> =
            serde_json::from_str(annotation(&after, ANNOTATION_NODE_ID).unwrap()).unwrap();
        assert_eq!(ids.get(DRIVER).map(String::as_str), Some(NODE_ID));
        let csinode = get_csinode(&c, &name).unwrap();
        assert_eq!(
            drivers_json(&csinode),
            json!([{"name": DRIVER, "nodeID": NODE_ID}]),
            "topologyKeys nil"
        );
    }
}

#[test]
fn install_refuses_an_empty_node_id_without_api_calls() {
    let c = admin();
    let name = unique("ni-noid");
    create_node(&c, &name, &[], &[], &[]);
    let err = run(manager(&name).install(DRIVER, "", 0, None)).unwrap_err();
    assert_eq!(
        err.message(),
        "error adding CSI driver node info: driverNodeID must not be empty"
    );
    assert!(annotation(&get_node(&c, &name), ANNOTATION_NODE_ID).is_none());
    assert!(get_csinode(&c, &name).is_none());
}

#[test]
fn install_sets_allocatable_count_clamped_to_int32_and_none_for_zero_or_negative() {
    let c = admin();
    for (limit, want) in [
        (10, json!({"count": 10})),
        (i32::MAX as i64, json!({"count": 2147483647})),
        (i32::MAX as i64 + 1, json!({"count": 2147483647})),
        (0, json!(null)),
        (-3, json!(null)),
    ] {
        let name = unique("ni-limit");
        create_node(&c, &name, &[], &[], &[]);
        install(&name, limit, None).unwrap();
        let drivers = drivers_json(&get_csinode(&c, &name).unwrap());
        assert_eq!(
            drivers[0]
                .get("allocatable")
                .cloned()
                .unwrap_or(json!(null)),
            want,
            "limit {limit}"
        );
    }
}

#[test]
fn install_updates_allocatable_count_and_keeps_other_node_capacity() {
    let c = admin();
    let name = unique("ni-limit20");
    create_node(&c, &name, &[], &[], &[("cpu", "4")]);
    install(&name, 10, None).unwrap();
    install(&name, 20, None).unwrap();
    let drivers = drivers_json(&get_csinode(&c, &name).unwrap());
    assert_eq!(
        drivers,
        json!([{"name": DRIVER, "nodeID": NODE_ID, "allocatable": {"count": 20}}])
    );
    let status = get_node(&c, &name).status.unwrap();
    assert_eq!(status.capacity.unwrap()["cpu"].0, "4");
    assert_eq!(status.allocatable.unwrap()["cpu"].0, "4");
}

#[test]
fn install_removes_the_legacy_attach_limit_resource_of_its_driver_only() {
    let c = admin();
    let name = unique("ni-legacy");
    let own = "attachable-volumes-csi-com.example.csi.driver1";
    let other = "attachable-volumes-csi-com.example.csi/driver1";
    create_node(
        &c,
        &name,
        &[],
        &[],
        &[(own, "10"), (other, "5"), ("cpu", "1")],
    );
    install(&name, 0, None).unwrap();
    let status = get_node(&c, &name).status.unwrap();
    let capacity: BTreeSet<String> = status.capacity.unwrap().into_keys().collect();
    let allocatable: BTreeSet<String> = status.allocatable.unwrap().into_keys().collect();
    let want: BTreeSet<String> = ["cpu", other].iter().map(|s| s.to_string()).collect();
    assert_eq!(capacity, want);
    assert_eq!(allocatable, want);
}

#[test]
fn install_after_initialization_puts_the_driver_first_in_the_existing_csinode() {
    let c = admin();
    let name = unique("ni-init");
    create_node(&c, &name, &[], &[], &[]);
    run(manager(&name).initialize_csinode()).unwrap();
    let csinode = get_csinode(&c, &name).expect("initialized CSINode");
    assert!(csinode.spec.drivers.is_empty());
    assert_eq!(
        csinode.metadata.annotations.as_ref().unwrap()[ANNOTATION_MIGRATED_PLUGINS],
        MIGRATED
    );
    install(&name, 0, None).unwrap();
    assert_eq!(
        drivers_json(&get_csinode(&c, &name).unwrap()),
        json!([{"name": DRIVER, "nodeID": NODE_ID}])
    );
}

#[test]
fn initialization_updates_a_stale_migration_annotation_and_keeps_others() {
    let c = admin();
    let name = unique("ni-mig");
    let node = create_node(&c, &name, &[], &[], &[]);
    let mut csinode = create_csinode(&c, &name, node.metadata.uid.as_deref().unwrap(), json!([]));
    csinode.metadata.annotations =
        Some(map(&[(ANNOTATION_MIGRATED_PLUGINS, "foo"), ("keep", "me")]));
    run(csinodes(&c).replace(&name, &Default::default(), &csinode)).unwrap();

    run(manager(&name).initialize_csinode()).unwrap();

    let a = get_csinode(&c, &name)
        .unwrap()
        .metadata
        .annotations
        .unwrap();
    assert_eq!(a[ANNOTATION_MIGRATED_PLUGINS], MIGRATED);
    assert_eq!(a["keep"], "me");
}

#[test]
fn portworx_gate_set_off_drops_portworx_from_the_migrated_plugins() {
    let c = admin();
    let name = unique("ni-pwx");
    create_node(&c, &name, &[], &[], &[]);
    let config = kcsi::HostConfig {
        feature_gates: [("CSIMigrationPortworx".to_string(), false)].into(),
        ..kcsi::HostConfig::node(&name, "/tmp")
    }
    .check()
    .unwrap();
    let nim = NodeInfoManager::new(
        admin(),
        &name,
        migrated_plugins(&config),
        Duration::from_secs(30),
    );
    run(nim.initialize_csinode()).unwrap();
    let a = get_csinode(&c, &name)
        .unwrap()
        .metadata
        .annotations
        .unwrap();
    assert_eq!(
        a[ANNOTATION_MIGRATED_PLUGINS],
        MIGRATED.replace("kubernetes.io/portworx-volume,", "")
    );
}

#[test]
fn install_replaces_a_csinode_owned_by_a_previous_node_of_the_same_name() {
    let c = admin();
    let name = unique("ni-stale");
    let node = create_node(&c, &name, &[], &[], &[]);
    create_csinode(
        &c,
        &name,
        "00000000-0000-0000-0000-000000000001",
        json!([{"name": OTHER, "nodeID": "old"}]),
    );

    install(&name, 0, None).unwrap();

    let csinode = get_csinode(&c, &name).unwrap();
    assert_eq!(
        csinode.metadata.owner_references.as_ref().unwrap()[0].uid,
        node.metadata.uid.unwrap()
    );
    assert_eq!(
        drivers_json(&csinode),
        json!([{"name": DRIVER, "nodeID": NODE_ID}]),
        "stale entries gone with the stale object"
    );
}

#[test]
fn install_replaces_a_csinode_without_a_node_owner_reference() {
    let c = admin();
    let name = unique("ni-orphan");
    let node = create_node(&c, &name, &[], &[], &[]);
    let orphan = create_csinode(&c, &name, "", json!([{"name": OTHER, "nodeID": "old"}]));

    install(&name, 0, None).unwrap();

    let csinode = get_csinode(&c, &name).unwrap();
    assert_ne!(
        csinode.metadata.uid, orphan.metadata.uid,
        "deleted and recreated"
    );
    let owner = &csinode.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), Some(&owner.uid)),
        ("Node", name.as_str(), node.metadata.uid.as_ref())
    );
    assert_eq!(
        drivers_json(&csinode),
        json!([{"name": DRIVER, "nodeID": NODE_ID}])
    );
}

#[test]
fn install_fails_with_not_found_when_the_node_does_not_exist() {
    let name = unique("ni-nonode");
    let err = install(&name, 0, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{}", err.message());
    // Upstream's wording around the API server's own text (nodeinfomanager.go
    // updateNodeIDInNode's retry), as client-go's errors read.
    assert_eq!(
        err.message(),
        format!("error updating Node object with CSI driver node info: error updating node: timed out waiting for the condition; caused by: nodes \"{name}\" not found")
    );
}

#[test]
fn uninstall_on_empty_node_without_csinode_changes_nothing() {
    let c = admin();
    let name = unique("nu-empty");
    let node = create_node(&c, &name, &[], &[], &[]);
    run(manager(&name).uninstall(DRIVER)).unwrap();
    assert_eq!(
        get_node(&c, &name).metadata.resource_version,
        node.metadata.resource_version
    );
    assert!(
        get_csinode(&c, &name).is_none(),
        "uninstall never creates a CSINode"
    );
}

#[test]
fn uninstall_removes_annotation_and_csinode_entry_but_keeps_topology_labels() {
    let c = admin();
    let name = unique("nu-same");
    create_node(&c, &name, &[], &[], &[]);
    install(&name, 5, zone_a()).unwrap();

    run(manager(&name).uninstall(DRIVER)).unwrap();

    let node = get_node(&c, &name);
    assert_eq!(
        annotation(&node, ANNOTATION_NODE_ID),
        None,
        "annotation removed entirely"
    );
    assert_eq!(
        labels(&node).get(ZONE).map(String::as_str),
        Some("zoneA"),
        "labels kept"
    );
    let csinode = get_csinode(&c, &name).expect("empty CSINode kept");
    assert!(csinode.spec.drivers.is_empty());
}

#[test]
fn uninstall_leaves_other_drivers_untouched() {
    let c = admin();
    let name = unique("nu-other");
    let ann = r#"{"net.example.storage.other-driver":"net.example.storage/test-node"}"#;
    let node = create_node(
        &c,
        &name,
        &[("net.example.storage/rack", "rack1")],
        &[(ANNOTATION_NODE_ID, ann)],
        &[],
    );
    let csinode = create_csinode(
        &c,
        &name,
        node.metadata.uid.as_deref().unwrap(),
        json!([{"name": OTHER, "nodeID": "net.example.storage/test-node"}]),
    );

    run(manager(&name).uninstall(DRIVER)).unwrap();

    let after = get_node(&c, &name);
    assert_eq!(
        after.metadata.resource_version, node.metadata.resource_version,
        "Node not written"
    );
    assert_eq!(
        get_csinode(&c, &name).unwrap().metadata.resource_version,
        csinode.metadata.resource_version,
        "CSINode not written"
    );
}

#[test]
fn uninstall_with_only_the_annotation_removes_own_key_and_keeps_others() {
    let c = admin();
    for (ann, want) in [
        (
            r#"{"com.example.csi.driver1":"com.example.csi/csi-node1"}"#,
            None,
        ),
        (
            r#"{"com.example.csi.driver1":"com.example.csi/csi-node1","net.example.storage.other-driver":"net.example.storage/test-node"}"#,
            Some(r#"{"net.example.storage.other-driver":"net.example.storage/test-node"}"#),
        ),
        (
            r#"{"net.example.storage.other-driver":"net.example.storage/test-node"}"#,
            Some(r#"{"net.example.storage.other-driver":"net.example.storage/test-node"}"#),
        ),
    ] {
        let name = unique("nu-ann");
        let node = create_node(&c, &name, &[], &[(ANNOTATION_NODE_ID, ann)], &[]);
        create_csinode(&c, &name, node.metadata.uid.as_deref().unwrap(), json!([]));
        run(manager(&name).uninstall(DRIVER)).unwrap();
        assert_eq!(annotation(&get_node(&c, &name), ANNOTATION_NODE_ID), want);
    }
}

#[test]
fn uninstall_removes_the_legacy_attach_limit_resource_of_its_driver_only() {
    let c = admin();
    let name = unique("nu-legacy");
    let own = "attachable-volumes-csi-com.example.csi.driver1";
    let other = "attachable-volumes-csi-com.example.csi/driver1";
    create_node(&c, &name, &[], &[], &[(own, "10"), (other, "5")]);
    run(manager(&name).uninstall(DRIVER)).unwrap();
    let status = get_node(&c, &name).status.unwrap();
    assert_eq!(
        status.capacity.unwrap().into_keys().collect::<Vec<_>>(),
        vec![other.to_string()]
    );
    assert_eq!(
        status.allocatable.unwrap().into_keys().collect::<Vec<_>>(),
        vec![other.to_string()]
    );
}

#[test]
fn install_rejects_an_unparsable_node_id_annotation() {
    let c = admin();
    let name = unique("ni-badann");
    create_node(&c, &name, &[], &[(ANNOTATION_NODE_ID, "not json")], &[]);
    let err = install(&name, 0, None).unwrap_err();
    assert!(
        err.message().contains("failed to parse node's \"csi.volume.kubernetes.io/nodeid\" annotation value (\"not json\") err="),
        "{}",
        err.message()
    );
}
