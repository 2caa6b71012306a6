//! Hosts with a kubeconfig against a real kube-apiserver and the real csi-driver-host-path:
//! registration publishes to Node and CSINode, CSINode start-up, CSIDriver-backed queries,
//! and the direct reads (VolumeAttachment, Secret, TokenRequest).

use kcsi_testkit as common;

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::apiserver::*;
use common::capi::{call, Host as CHost};
use common::{driver_names, short_tempdir, wait_for, DriverProcess};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kcsi::ffi::error::kcsi_error;
use kcsi::ffi::host::kcsi_host;
use kcsi::ffi::queries::{
    kcsi_can_attach, kcsi_host_csidriver_apply, kcsi_host_csidriver_delete,
    kcsi_host_csidriver_generation, kcsi_host_csidrivers_synced, kcsi_host_volumeattachment_apply,
    kcsi_requires_remount,
};
use kcsi::registration;
use kcsi::ErrorKind;
use kcsi::HostConfig;
use kcsi::NodeAgent;
use kcsi::ANNOTATION_NODE_ID;
use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

/// hostpathplugin's topology segment (pkg/hostpath/nodeserver.go NodeGetInfo), valued with its
/// node id.
const TOPOLOGY_KEY: &str = "topology.hostpath.csi/node";

/// The real hostpath driver serving `name`, with node id `name`; with `topology` it reports
/// the segment TOPOLOGY_KEY=`name` (several drivers on one node would collide on that key).
fn driver(name: &str, topology: bool, extra: &[&str]) -> DriverProcess {
    let mut flags = vec![format!("--enable-topology={topology}")];
    flags.extend(extra.iter().map(|f| f.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    DriverProcess::hostpath_named(name, name, &flags)
}

/// A host for `node` (which must exist) using the shared API server.
fn host(node: &str) -> (tempfile::TempDir, NodeAgent) {
    let root = short_tempdir("kcsi-root");
    let config = ApiServer::shared().node_config(root.path(), node);
    (root, NodeAgent::new(config.check().unwrap()).unwrap())
}

fn register(host: &NodeAgent, driver: &DriverProcess) -> kcsi::Result<kcsi::NodeInfo> {
    run(registration::register(
        host,
        &driver.name,
        &driver.endpoint(),
        &["1.0.0".to_string()],
        None,
    ))
}

fn deregister(host: &NodeAgent, name: &str) {
    run(registration::deregister(host, name)).unwrap();
}

fn node_ids(c: &kcsi::ApiClient, node: &str) -> BTreeMap<String, String> {
    annotation(&get_node(c, node), ANNOTATION_NODE_ID)
        .map(|a| serde_json::from_str(a).unwrap())
        .unwrap_or_default()
}

#[test]
fn register_publishes_node_info_and_deregister_removes_it_but_keeps_labels() {
    let c = admin();
    let node = unique("reg");
    create_node(&c, &node, &[], &[], &[]);
    let driver = driver(
        &format!("{node}.csi.example.com"),
        true,
        &["--maxvolumespernode=3"],
    );
    let (_root, host) = host(&node);

    register(&host, &driver).unwrap();

    assert_eq!(driver_names(&host), vec![driver.name.clone()]);
    assert_eq!(node_ids(&c, &node), map(&[(&driver.name, &driver.name)]));
    assert_eq!(
        labels(&get_node(&c, &node))
            .get(TOPOLOGY_KEY)
            .map(String::as_str),
        Some(driver.name.as_str())
    );
    let csinode = get_csinode(&c, &node).unwrap();
    assert_eq!(
        drivers_json(&csinode),
        json!([{"name": driver.name, "nodeID": driver.name, "topologyKeys": [TOPOLOGY_KEY], "allocatable": {"count": 3}}])
    );

    deregister(&host, &driver.name);

    assert!(driver_names(&host).is_empty());
    assert!(annotation(&get_node(&c, &node), ANNOTATION_NODE_ID).is_none());
    assert_eq!(
        labels(&get_node(&c, &node))
            .get(TOPOLOGY_KEY)
            .map(String::as_str),
        Some(driver.name.as_str())
    );
    assert!(get_csinode(&c, &node).unwrap().spec.drivers.is_empty());
}

#[test]
fn host_status_reports_csinode_initialized_once_the_api_server_answers() {
    let c = admin();
    let node = unique("init");
    create_node(&c, &node, &[], &[], &[]);
    let (_root, host) = host(&node);
    wait_for("csiNodeInitialized", Duration::from_secs(30), || {
        host.status().csi_node_initialized
    });
    let status = host.status();
    assert_eq!(status.last_error, None);
    assert!(!status.standalone);
    let csinode = get_csinode(&c, &node).expect("CSINode created at start-up");
    assert_eq!(csinode.metadata.owner_references.unwrap()[0].name, node);
}

#[test]
fn reregister_after_a_topology_change_fails_with_the_collision_and_stays_unregistered() {
    let c = admin();
    let node = unique("topo");
    create_node(&c, &node, &[], &[], &[]);
    let driver = driver(&format!("{node}.csi.example.com"), true, &[]);
    let (_root, host) = host(&node);
    register(&host, &driver).unwrap();
    deregister(&host, &driver.name);
    // The label left by the last registration now names another place, as if the driver had
    // moved: labels are add-only, so the next registration collides.
    let mut n = get_node(&c, &node);
    n.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(TOPOLOGY_KEY.into(), "elsewhere".into());
    run(nodes(&c).replace(&node, &PostParams::default(), &n)).unwrap();

    let err = register(&host, &driver).unwrap_err();

    assert!(
        err.message().contains(&format!(
            "detected topology value collision: driver reported \"{TOPOLOGY_KEY}\":\"{}\" but existing label is \"{TOPOLOGY_KEY}\":\"elsewhere\"",
            driver.name
        )),
        "{}",
        err.message()
    );
    assert!(driver_names(&host).is_empty());
    assert!(host.drivers().get(&driver.name).is_none());
    assert!(node_ids(&c, &node).is_empty());
    assert!(get_csinode(&c, &node).unwrap().spec.drivers.is_empty());
}

#[test]
fn two_hosts_for_two_nodes_register_concurrently_without_seeing_each_other() {
    let c = admin();
    let nodes_: Vec<String> = (0..2).map(|_| unique("pair")).collect();
    for n in &nodes_ {
        create_node(&c, n, &[], &[], &[]);
    }
    let threads: Vec<_> = nodes_
        .iter()
        .map(|n| {
            let n = n.clone();
            std::thread::spawn(move || {
                let drivers: Vec<DriverProcess> = (0..3)
                    .map(|i| driver(&format!("d{i}.{n}.csi.example.com"), false, &[]))
                    .collect();
                let (_root, host) = host(&n);
                let hosts_drivers: Vec<_> = drivers.iter().collect();
                std::thread::scope(|s| {
                    for d in &hosts_drivers {
                        let host = &host;
                        s.spawn(move || register(host, d).unwrap());
                    }
                });
                (
                    n,
                    driver_names(&host),
                    drivers.iter().map(|d| d.name.clone()).collect::<Vec<_>>(),
                )
            })
        })
        .collect();
    for t in threads {
        let (n, listed, mut names) = t.join().unwrap();
        names.sort();
        assert_eq!(listed, names, "host of {n} lists only its own drivers");
        let ids: Vec<String> = node_ids(&c, &n).into_keys().collect();
        assert_eq!(ids, names, "Node {n} annotation has exactly its drivers");
        let mut entries: Vec<String> = get_csinode(&c, &n)
            .unwrap()
            .spec
            .drivers
            .into_iter()
            .map(|d| d.name)
            .collect();
        entries.sort();
        assert_eq!(entries, names, "CSINode {n} has exactly its drivers");
    }
}

/// Another writer of `name`: adds its own annotations by read-modify-write with the
/// resourceVersion (as `kubectl edit` does), retrying on conflict, until `stop`. Returns how
/// many it added.
fn other_writer<K: Object>(
    api: Api<K>,
    name: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut written = 0;
        while !stop.load(Ordering::SeqCst) {
            loop {
                let mut object = run(api.get(&name)).expect("other writer: get");
                object
                    .annotations_mut()
                    .insert(format!("example.com/other-{written}"), "x".into());
                match run(api.replace(&name, &PostParams::default(), &object)) {
                    Ok(_) => break,
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => panic!("other writer: {e}"),
                }
            }
            written += 1;
            // A busy writer, not a continuous one: against back-to-back writes on a loaded
            // machine, upstream's bounded conflict backoff can run out, which is not the lost
            // update this test looks for.
            std::thread::sleep(Duration::from_millis(5));
        }
        written
    })
}

fn assert_all_kept(annotations: &BTreeMap<String, String>, written: usize, what: &str) {
    assert!(written > 0, "the other writer of the {what} made no update");
    for i in 0..written {
        assert!(
            annotations.contains_key(&format!("example.com/other-{i}")),
            "the other writer's {what} annotation {i} of {written} was lost"
        );
    }
}

#[test]
fn register_cycles_racing_other_writers_of_node_and_csinode_lose_no_update() {
    let c = admin();
    let node = unique("race");
    create_node(&c, &node, &[], &[], &[]);
    let driver = driver(&format!("{node}.csi.example.com"), true, &[]);
    let (_root, host) = host(&node);
    wait_for("csiNodeInitialized", Duration::from_secs(30), || {
        host.status().csi_node_initialized
    });
    let stop = Arc::new(AtomicBool::new(false));
    let node_writer = other_writer(nodes(&c), node.clone(), stop.clone());
    let csinode_writer = other_writer(csinodes(&c), node.clone(), stop.clone());
    for cycle in 0..20 {
        register(&host, &driver).unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        assert_eq!(
            node_ids(&c, &node).get(&driver.name),
            Some(&driver.name),
            "cycle {cycle}"
        );
        let entries = get_csinode(&c, &node).unwrap().spec.drivers;
        assert_eq!(entries.len(), 1, "cycle {cycle}");
        deregister(&host, &driver.name);
        assert!(
            !node_ids(&c, &node).contains_key(&driver.name),
            "cycle {cycle}"
        );
        assert!(
            get_csinode(&c, &node).unwrap().spec.drivers.is_empty(),
            "cycle {cycle}"
        );
    }
    stop.store(true, Ordering::SeqCst);
    let (node_writes, csinode_writes) =
        (node_writer.join().unwrap(), csinode_writer.join().unwrap());
    assert_all_kept(
        &get_node(&c, &node).metadata.annotations.unwrap_or_default(),
        node_writes,
        "Node",
    );
    assert_all_kept(
        &get_csinode(&c, &node)
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default(),
        csinode_writes,
        "CSINode",
    );
    eprintln!("other writers made {node_writes} Node and {csinode_writes} CSINode updates during 20 cycles");
}

#[test]
fn node_recreated_with_the_same_name_gets_a_fresh_csinode_at_the_next_registration() {
    let c = admin();
    let node = unique("recreate");
    let first = create_node(&c, &node, &[], &[], &[]);
    let driver = driver(&format!("{node}.csi.example.com"), false, &[]);
    let (_root, host) = host(&node);
    register(&host, &driver).unwrap();
    deregister(&host, &driver.name);
    delete_node(&c, &node);
    let second = create_node(&c, &node, &[], &[], &[]);
    assert_ne!(first.metadata.uid, second.metadata.uid);

    register(&host, &driver).unwrap();

    let csinode = get_csinode(&c, &node).unwrap();
    assert_eq!(
        csinode.metadata.owner_references.as_ref().unwrap()[0].uid,
        second.metadata.uid.unwrap()
    );
    assert_eq!(
        drivers_json(&csinode),
        json!([{"name": driver.name, "nodeID": driver.name}])
    );
}

/// A host made through the C API on `node` (which must exist), for the queries.
fn c_host(node: &str) -> CHost {
    let root = short_tempdir("kcsi-root");
    let config: serde_json::Value =
        serde_json::from_str(&ApiServer::shared().host_config(root.path(), node)).unwrap();
    CHost::owning(root, &config)
}

/// One boolean query (kcsi_can_attach, kcsi_requires_remount) of `spec`.
fn query(
    host: &CHost,
    f: extern "C" fn(*mut kcsi_host, *const c_char, *mut bool, *mut *mut kcsi_error) -> i32,
    spec: &CStr,
) -> bool {
    let mut out = false;
    call(|e| f(host.ptr, spec.as_ptr(), &mut out, e)).unwrap();
    out
}

/// A C host on a new node, the name of a driver with no CSIDriver object yet, and the JSON spec
/// of a PersistentVolume of that driver.
fn host_with_pv_of_new_driver(c: &kcsi::ApiClient, prefix: &str) -> (CHost, String, CString) {
    let node = unique(prefix);
    create_node(c, &node, &[], &[], &[]);
    let name = format!("{node}.csi.example.com");
    let spec = CString::new(
        json!({"persistentVolume": {"metadata": {"name": "pv-1"}, "spec": {"csi": {"driver": name, "volumeHandle": "h-1"}}}})
            .to_string(),
    )
    .unwrap();
    (c_host(&node), name, spec)
}

#[test]
fn queries_follow_csidriver_objects_created_changed_and_deleted() {
    let c = admin();
    let (host, name, spec) = host_with_pv_of_new_driver(&c, "facts");
    let can_attach = || query(&host, kcsi_can_attach, &spec);
    let requires_remount = || query(&host, kcsi_requires_remount, &spec);
    wait_for("CSIDriver list", Duration::from_secs(30), || {
        host.status()["csiDriversSynced"] == json!(true)
    });
    assert!(can_attach(), "no CSIDriver: attach required");
    assert!(!requires_remount());

    let api: Api<CSIDriver> = Api::all(c.client.clone());
    let object: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"attachRequired": false, "podInfoOnMount": true, "fsGroupPolicy": "File"}
    }))
    .unwrap();
    run(api.create(&PostParams::default(), &object)).unwrap();
    wait_for("attachRequired false", Duration::from_secs(10), || {
        !can_attach()
    });

    let mut current = run(api.get(&name)).unwrap();
    current.spec.requires_republish = Some(true);
    run(api.replace(&name, &PostParams::default(), &current)).unwrap();
    wait_for(
        "requiresRepublish true",
        Duration::from_secs(10),
        requires_remount,
    );

    run(api.delete(&name, &DeleteParams::default())).unwrap();
    wait_for("defaults again", Duration::from_secs(10), can_attach);
    assert!(!requires_remount());
}

/// `"csiDriversFromHost"`: the facts follow what the program's own informer feeds, and kcsi's
/// client sends no CSIDriver request, as the API server's audit log shows (the object below
/// exists in the API server and says the opposite of what is fed).
#[test]
fn a_host_fed_its_csidrivers_follows_the_feed_and_never_lists_or_watches_them() {
    let c = admin();
    let node = unique("fed");
    let credentials = short_tempdir("kcsi-kubeconfig");
    create_node(&c, &node, &[], &[], &[]);
    let name = format!("{node}.csi.example.com");
    let api: Api<CSIDriver> = Api::all(c.client.clone());
    let listed: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": name}, "spec": {"attachRequired": false}
    }))
    .unwrap();
    run(api.create(&PostParams::default(), &listed)).unwrap();
    let root = short_tempdir("kcsi-root");
    let mut config: serde_json::Value =
        serde_json::from_str(&ApiServer::shared().host_config(root.path(), &node)).unwrap();
    config["csiDriversFromHost"] = json!(true);
    config["kubeconfig"] = json!(ApiServer::shared().kubeconfig_as(credentials.path(), &node));
    let host = CHost::owning(root, &config);
    let spec = CString::new(
        json!({"persistentVolume": {"metadata": {"name": "pv-1"}, "spec": {"csi": {"driver": name, "volumeHandle": "h-1"}}}})
            .to_string(),
    )
    .unwrap();
    let feed = |object: serde_json::Value| {
        let text = CString::new(object.to_string()).unwrap();
        call(|e| kcsi_host_csidriver_apply(host.ptr, text.as_ptr(), e))
    };
    let mut counter: *const u64 = std::ptr::null();
    call(|e| kcsi_host_csidriver_generation(host.ptr, &mut counter, e)).unwrap();
    let generation = || unsafe { AtomicU64::from_ptr(counter.cast_mut()) }.load(Ordering::Acquire);
    assert_eq!(host.status()["csiDriversSynced"], json!(false));

    call(|e| kcsi_host_csidrivers_synced(host.ptr, e)).unwrap();
    assert_eq!(host.status()["csiDriversSynced"], json!(true));
    assert!(
        query(&host, kcsi_can_attach, &spec),
        "nothing fed: attach required"
    );
    feed(json!({"metadata": {"name": name}, "spec": {"attachRequired": false, "requiresRepublish": true}})).unwrap();
    assert!(!query(&host, kcsi_can_attach, &spec));
    assert!(query(&host, kcsi_requires_remount, &spec));
    let before = generation();
    let n = CString::new(name.as_str()).unwrap();
    call(|e| kcsi_host_csidriver_delete(host.ptr, n.as_ptr(), e)).unwrap();
    assert!(generation() > before, "a delete moves the generation");
    assert!(
        query(&host, kcsi_can_attach, &spec),
        "deleted: defaults again"
    );
    let err = call(|e| kcsi_host_csidriver_delete(host.ptr, n.as_ptr(), e)).unwrap_err();
    assert_eq!(err.result, kcsi::ffi::KCSI_ERR_NOT_FOUND, "{}", err.message);

    let err = feed(json!({"spec": {}})).unwrap_err();
    assert_eq!(err.result, kcsi::ffi::KCSI_ERR_INVALID_ARGUMENT);
    assert!(err.message.contains("no metadata.name"), "{}", err.message);
    let bad = CString::new("{not json").unwrap();
    let err = call(|e| kcsi_host_csidriver_apply(host.ptr, bad.as_ptr(), e)).unwrap_err();
    assert_eq!(err.result, kcsi::ffi::KCSI_ERR_INVALID_ARGUMENT);
    let err = call(|e| kcsi_host_csidriver_apply(host.ptr, std::ptr::null(), e)).unwrap_err();
    assert_eq!(err.result, kcsi::ffi::KCSI_ERR_INVALID_ARGUMENT);

    // A host starts its CSIDriver watch and its CSINode start-up together: once the start-up
    // has created the CSINode, a list or watch of its own would be in the audit log too.
    let audited = |resource: &str| -> Vec<serde_json::Value> {
        let mut events = ApiServer::shared().audit_events_as(&node);
        events.retain(|e| e["objectRef"]["resource"] == resource);
        events
    };
    wait_for(
        "the host's CSINode create in the audit log",
        Duration::from_secs(30),
        || audited("csinodes").iter().any(|e| e["verb"] == "create"),
    );
    assert_eq!(audited("csidrivers"), Vec::<serde_json::Value>::new());
    run(api.delete(&name, &DeleteParams::default())).unwrap();
}

/// The audit log the test above reads shows a host's own CSIDriver list and watch, told apart
/// by the user its kubeconfig impersonates.
#[test]
fn an_unfed_hosts_csidriver_list_and_watch_are_in_the_audit_log_under_its_user() {
    let node = unique("unfed");
    create_node(&admin(), &node, &[], &[], &[]);
    let credentials = short_tempdir("kcsi-kubeconfig");
    let root = short_tempdir("kcsi-root");
    let mut config: serde_json::Value =
        serde_json::from_str(&ApiServer::shared().host_config(root.path(), &node)).unwrap();
    config["kubeconfig"] = json!(ApiServer::shared().kubeconfig_as(credentials.path(), &node));
    let _host = CHost::owning(root, &config);
    wait_for(
        "the host's CSIDriver list and watch in the audit log",
        Duration::from_secs(30),
        || {
            let events = ApiServer::shared().audit_events_as(&node);
            ["list", "watch"].iter().all(|verb| {
                events
                    .iter()
                    .any(|e| e["objectRef"]["resource"] == "csidrivers" && e["verb"] == *verb)
            })
        },
    );
}

#[test]
fn only_a_host_made_to_be_fed_takes_csidrivers_from_its_program() {
    let c = admin();
    let (host, name, _) = host_with_pv_of_new_driver(&c, "unfed");
    let object = CString::new(json!({"metadata": {"name": name}}).to_string()).unwrap();
    let err = call(|e| kcsi_host_csidriver_apply(host.ptr, object.as_ptr(), e)).unwrap_err();
    assert_eq!(err.result, kcsi::ffi::KCSI_ERR_FAILED_PRECONDITION);
    assert!(
        err.message
            .contains("lists and watches the CSIDriver objects itself"),
        "{}",
        err.message
    );
    let err = call(|e| kcsi_host_csidrivers_synced(host.ptr, e)).unwrap_err();
    assert_eq!(err.result, kcsi::ffi::KCSI_ERR_FAILED_PRECONDITION);
    let err = call(|e| kcsi_host_volumeattachment_apply(host.ptr, object.as_ptr(), e)).unwrap_err();
    assert_eq!(err.result, kcsi::ffi::KCSI_ERR_FAILED_PRECONDITION);
    assert!(
        err.message
            .contains("is a node host, which keeps no VolumeAttachment objects"),
        "{}",
        err.message
    );
    let standalone = HostConfig {
        csi_drivers_from_host: true,
        ..HostConfig::node("n", "/tmp/kcsi-x")
    }
    .check()
    .unwrap_err();
    assert!(
        standalone
            .message()
            .contains("\"csiDriversFromHost\" needs a \"kubeconfig\""),
        "{standalone}"
    );
}

/// The promise a caller's cache rests on: every change of a CSIDriver object moves the
/// generation once the store holds it, so an answer cached with the generation read before
/// asking is replaced as soon as the object changes. (The store takes a change an instant
/// before the counter moves: a query in that instant already sees the new answer beside the
/// old generation, which a cache only re-asks for.)
#[test]
fn csidriver_generation_moves_with_every_change_that_changes_an_answer() {
    let c = admin();
    let (host, name, spec) = host_with_pv_of_new_driver(&c, "generation");
    let mut counter: *const u64 = std::ptr::null();
    call(|e| kcsi_host_csidriver_generation(host.ptr, &mut counter, e)).unwrap();
    let generation = || unsafe { AtomicU64::from_ptr(counter.cast_mut()) }.load(Ordering::Acquire);
    wait_for("CSIDriver list", Duration::from_secs(30), || {
        host.status()["csiDriversSynced"] == json!(true)
    });
    // What a cache would hold: the generation read before asking, and the answer.
    let cached = || (generation(), query(&host, kcsi_can_attach, &spec));
    let (synced, attach) = cached();
    assert!(synced > 0, "the first list moved the generation");
    assert!(attach, "no CSIDriver: attach required");

    let api: Api<CSIDriver> = Api::all(c.client.clone());
    let mut held = synced;
    let mut expect_change = |want: bool, what: &str| {
        wait_for(what, Duration::from_secs(10), || cached().1 == want);
        wait_for(
            &format!("{what}: the generation to move past the old answer's"),
            Duration::from_secs(2),
            || generation() > held,
        );
        let (now, answer) = cached();
        assert_eq!(
            answer, want,
            "{what}: asked again after the generation moved"
        );
        held = now;
        now
    };
    let object: CSIDriver = serde_json::from_value(
        json!({"metadata": {"name": name}, "spec": {"attachRequired": false}}),
    )
    .unwrap();
    run(api.create(&PostParams::default(), &object)).unwrap();
    let created = expect_change(false, "attachRequired false");
    assert!(created > synced);
    run(api.delete(&name, &DeleteParams::default())).unwrap();
    let deleted = expect_change(true, "defaults again");
    assert!(deleted > created);

    // The pointer names one counter for the host's life.
    let mut again: *const u64 = std::ptr::null();
    call(|e| kcsi_host_csidriver_generation(host.ptr, &mut again, e)).unwrap();
    assert_eq!(again, counter);
}

#[test]
fn driver_facts_come_from_the_csidriver_object_with_api_defaults() {
    let c = admin();
    let node = unique("facts2");
    create_node(&c, &node, &[], &[], &[]);
    let (_root, host) = host(&node);
    let name = format!("{node}.csi.example.com");
    wait_for("CSIDriver list", Duration::from_secs(30), || {
        host.status().csi_drivers_synced == Some(true)
    });
    assert!(!host.driver_facts(&name).unwrap().exists);
    let object: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"podInfoOnMount": true, "fsGroupPolicy": "File", "volumeLifecycleModes": ["Ephemeral"],
                 "seLinuxMount": true, "tokenRequests": [{"audience": "vault.example.com"}]}
    }))
    .unwrap();
    run(Api::<CSIDriver>::all(c.client.clone()).create(&PostParams::default(), &object)).unwrap();
    wait_for("CSIDriver seen", Duration::from_secs(10), || {
        host.driver_facts(&name).unwrap().exists
    });
    let facts = host.driver_facts(&name).unwrap();
    assert!(facts.attach_required, "API default");
    assert!(facts.pod_info_on_mount && facts.se_linux_mount);
    assert_eq!(facts.fs_group_policy, kcsi::FsGroupPolicy::File);
    assert_eq!(facts.lifecycle_modes, vec!["Ephemeral".to_string()]);
    assert_eq!(facts.token_requests[0].expiration_seconds, Some(3600));
}

#[test]
fn volume_attachment_and_secret_reads_name_the_object_and_never_the_secret() {
    let c = admin();
    let node = unique("reads");
    create_node(&c, &node, &[], &[], &[]);
    let (_root, host) = host(&node);

    let err = run(host.volume_attachment("csi-missing")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // The API server's own text, passed on as upstream's plugin does.
    assert_eq!(
        err.message(),
        r#"volumeattachments.storage.k8s.io "csi-missing" not found"#
    );

    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": format!("csi-{node}")},
        "spec": {"attacher": "x.csi.example.com", "nodeName": node, "source": {"persistentVolumeName": "pv-1"}}
    }))
    .unwrap();
    run(Api::<VolumeAttachment>::all(c.client.clone()).create(&PostParams::default(), &va))
        .unwrap();
    assert_eq!(
        run(host.volume_attachment(&format!("csi-{node}")))
            .unwrap()
            .spec
            .node_name,
        node
    );

    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), "default");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": node},
        "data": {"user": "YWRtaW4=", "pass": "czNjcjN0"}
    }))
    .unwrap();
    run(secrets.create(&PostParams::default(), &secret)).unwrap();
    let data = run(host.secret_data("default", &node)).unwrap();
    assert_eq!(data, map(&[("pass", "s3cr3t"), ("user", "admin")]));

    let bad: Secret = serde_json::from_value(
        json!({"metadata": {"name": format!("{node}-bin")}, "data": {"blob": "/w=="}}),
    )
    .unwrap();
    run(secrets.create(&PostParams::default(), &bad)).unwrap();
    let err = run(host.secret_data("default", &format!("{node}-bin"))).unwrap_err();
    assert!(
        err.message()
            .contains(&format!("Secret default/{node}-bin"))
            && err.message().contains("\"blob\""),
        "{}",
        err.message()
    );

    let err = run(host.secret_data("default", "no-such-secret")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.message(), r#"secrets "no-such-secret" not found"#);
}

/// The JSON payload of a JWT (base64url, no padding).
fn jwt_payload(token: &str) -> serde_json::Value {
    let part = token.split('.').nth(1).unwrap();
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let (mut bits, mut acc, mut out) = (0u32, 0u32, Vec::new());
    for ch in part.bytes() {
        acc = (acc << 6) | alphabet.iter().position(|&a| a == ch).unwrap() as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    serde_json::from_slice(&out).unwrap()
}

/// A service account and a pod using it, both named `node`, in `default`.
fn token_pod(c: &kcsi::ApiClient, node: &str) -> Pod {
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": node}})).unwrap();
    run(
        Api::<ServiceAccount>::namespaced(c.client.clone(), "default")
            .create(&PostParams::default(), &sa),
    )
    .unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": node, "namespace": "default"},
        "spec": {"serviceAccountName": node, "nodeName": node, "containers": [{"name": "c", "image": "example.com/none"}]}
    }))
    .unwrap();
    run(Api::<Pod>::namespaced(c.client.clone(), "default").create(&PostParams::default(), &pod))
        .unwrap()
}

#[test]
fn service_account_token_is_bound_to_the_pod_with_the_requested_audience() {
    let c = admin();
    let node = unique("token");
    create_node(&c, &node, &[], &[], &[]);
    let (_root, host) = host(&node);
    let pod = token_pod(&c, &node);

    let status =
        run(host.service_account_token(&pod, vec!["vault.example.com".into()], 3600)).unwrap();

    let claims = jwt_payload(status.token.as_deref().expect("token"));
    assert_eq!(claims["aud"], json!(["vault.example.com"]));
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], json!(node));
    assert_eq!(
        claims["kubernetes.io"]["pod"]["uid"],
        json!(pod.metadata.uid.unwrap())
    );
    assert_eq!(
        claims["kubernetes.io"]["serviceaccount"]["name"],
        json!(node)
    );
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        3600
    );

    let mut stranger = get_pod_copy(&node);
    stranger.metadata.uid = Some("00000000-0000-0000-0000-00000000dead".into());
    let err = run(host.service_account_token(&stranger, vec!["a".into()], 3600)).unwrap_err();
    assert!(
        !err.message().contains("eyJ"),
        "no token material in errors: {}",
        err.message()
    );
    // The API server's own refusal, which names the pod the token was to be bound to.
    assert!(
        err.message().contains(&format!(
            "Operation cannot be fulfilled on Pod \"{}\": the UID in the bound object reference",
            stranger.metadata.name.as_deref().unwrap()
        )),
        "{}",
        err.message()
    );
}

#[test]
fn service_account_tokens_are_cached_per_pod_audience_and_expiration_and_counted() {
    let c = admin();
    let node = unique("token-cache");
    create_node(&c, &node, &[], &[], &[]);
    let (_root, host) = host(&node);
    let pod = token_pod(&c, &node);
    let token = |aud: &str, exp: i64| {
        run(host.service_account_token(&pod, vec![aud.to_string()], exp))
            .unwrap()
            .token
            .unwrap()
    };
    let first = token("a", 3600);
    assert_eq!(
        token("a", 3600),
        first,
        "reused well within 80 % of its TTL"
    );
    assert_ne!(token("b", 3600), first, "another audience is another token");
    assert_ne!(
        token("a", 7200),
        first,
        "another expiration is another token"
    );
    assert_eq!(token("a", 3600), first);
    let text = host.metrics_text().unwrap();
    let line = r#"kcsi_api_requests_total{verb="create",resource="serviceaccounts/token"} 3"#;
    assert!(text.contains(line), "{line} in {text}");
}

fn get_pod_copy(name: &str) -> Pod {
    let c = admin();
    run(Api::<Pod>::namespaced(c.client.clone(), "default").get(name)).unwrap()
}

#[test]
fn standalone_host_still_refuses_api_reads_and_registers_without_api_writes() {
    let root = short_tempdir("kcsi-root");
    let host = NodeAgent::new(
        HostConfig::node("standalone-node", root.path())
            .check()
            .unwrap(),
    )
    .unwrap();
    let err = run(host.volume_attachment("csi-x")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotSupported);
    let driver = driver("standalone.csi.example.com", true, &[]);
    register(&host, &driver).unwrap();
    assert!(!host.status().csi_node_initialized);
    assert_eq!(host.status().last_error, None);
    deregister(&host, &driver.name);
}

#[test]
fn freeing_the_host_stops_its_background_tasks() {
    // No such Node: the CSINode start-up keeps retrying, so its task is alive until aborted.
    let node = unique("freed");
    let (_root, host) = host(&node);
    let nim = host.kube().unwrap().node_info.clone();
    wait_for("a failed initialization", Duration::from_secs(30), || {
        host.status().last_error.as_deref() != Some("CSINode is not yet initialized")
    });
    assert!(
        Arc::strong_count(&nim) > 2,
        "host and start-up task hold the node info manager"
    );
    drop(host);
    wait_for("the start-up task to end", Duration::from_secs(5), || {
        Arc::strong_count(&nim) == 1
    });
}

#[test]
fn queries_right_after_host_creation_wait_for_the_first_csidriver_list() {
    let c = admin();
    let node = unique("early");
    create_node(&c, &node, &[], &[], &[]);
    let host = c_host(&node);
    let spec = CString::new(
        json!({"persistentVolume": {"metadata": {"name": "pv-1"}, "spec": {"csi": {"driver": "early.csi.example.com", "volumeHandle": "h"}}}})
            .to_string(),
    )
    .unwrap();
    assert!(query(&host, kcsi_can_attach, &spec));
    assert_eq!(host.status()["csiDriversSynced"], json!(true));
}

#[test]
fn unreadable_kubeconfig_fails_host_creation_naming_the_file() {
    let root = short_tempdir("kcsi-root");
    let config = HostConfig {
        kubeconfig: Some("/nonexistent/kubeconfig".into()),
        ..HostConfig::node("n", root.path())
    };
    let err = NodeAgent::new(config.check().unwrap())
        .err()
        .expect("host creation fails");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message().contains("/nonexistent/kubeconfig"),
        "{}",
        err.message()
    );
}
