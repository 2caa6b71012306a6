//! The controller host's Attach, Detach and VolumesAreAttached against a real kube-apiserver,
//! the real external-attacher v4.12 and the real hostpath driver started with
//! `-enable-attach` (ControllerPublish / ControllerUnpublish), plus the role rules and the bad
//! input of the three calls.

use kcsi_testkit as common;

use std::time::{Duration, Instant};

use common::apiserver::*;
use common::capi::*;
use common::plugin_peers::Process;
use common::{peer_binary, short_tempdir, DriverProcess};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kcsi::ffi::*;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// One driver (its own name, so its external-attacher sees only this test's attachments), a
/// Node with its CSINode, the external-attacher for the driver, and a controller host.
struct Cluster {
    driver_name: String,
    node: String,
    driver: DriverProcess,
    _attacher: Process,
    /// Owns the attacher's host (a child handle holds its host weakly).
    _host: Host,
    attacher: Attacher,
}

impl Cluster {
    fn new(driver_flags: &[&str]) -> Cluster {
        let api = ApiServer::shared();
        let node = unique("ctl");
        let driver_name = format!("{node}.csi.k8s.io");
        let c = admin();
        let n = create_node(&c, &node, &[], &[], &[]);
        let mut flags = vec!["-enable-attach"];
        flags.extend_from_slice(driver_flags);
        let driver = DriverProcess::hostpath_named(&driver_name, &node, &flags);
        let uid = n.metadata.uid.clone().unwrap();
        create_csinode(
            &c,
            &node,
            &uid,
            json!([{"name": driver_name, "nodeID": node}]),
        );
        let log = driver.dir.path().join("external-attacher.log");
        let attacher = Process::spawn(
            peer_binary("attacher"),
            vec![
                format!("--csi-address={}", driver.endpoint()),
                format!("--kubeconfig={}", api.kubeconfig.display()),
                "--timeout=30s".into(),
                "--v=5".into(),
            ],
            log,
        );
        let host = Host::controller(&api.kubeconfig);
        common::wait_for(
            "VolumeAttachment and CSIDriver watches synced",
            Duration::from_secs(30),
            || {
                let s = host.status();
                s["volumeAttachmentsSynced"] == true && s["csiDriversSynced"] == true
            },
        );
        let attacher_handle = host.attacher();
        Cluster {
            driver_name,
            node,
            driver,
            _attacher: attacher,
            _host: host,
            attacher: attacher_handle,
        }
    }

    /// A volume the driver created, with its PersistentVolume in the API server (the
    /// external-attacher reads the CSI source from it); returns the kcsi spec for the PV.
    fn volume(&self, name: &str) -> (String, Value) {
        let handle = self.driver.create_volume(name, false, 0);
        let pv_name = format!("pv-{name}-{}", self.node);
        let pv_json = json!({
            "metadata": {"name": pv_name},
            "spec": {
                "capacity": {"storage": "1Mi"},
                "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": self.driver_name, "volumeHandle": handle},
            }
        });
        let pv: PersistentVolume = serde_json::from_value(pv_json.clone()).unwrap();
        let pvs: Api<PersistentVolume> = Api::all(admin().client.clone());
        run(pvs.create(&PostParams::default(), &pv)).expect("create PersistentVolume");
        (handle, json!({"persistentVolume": pv_json}))
    }

    fn va_name(&self, handle: &str) -> String {
        kcsi::attachment_name(handle, &self.driver_name, &self.node)
    }

    fn volume_name(&self, handle: &str) -> String {
        format!("{}^{handle}", self.driver_name)
    }

    fn va(&self, name: &str) -> Option<VolumeAttachment> {
        let vas: Api<VolumeAttachment> = Api::all(admin().client.clone());
        run(vas.get_opt(name)).expect("get VolumeAttachment")
    }

    fn attacher_log(&self) -> String {
        self._attacher.log_text()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Attachments this test left (a failed assertion) must not block the next run's node.
        let vas: Api<VolumeAttachment> = Api::all(admin().client.clone());
        if let Ok(list) = run(vas.list(&Default::default())) {
            for va in list.items.iter().filter(|v| v.spec.node_name == self.node) {
                let _ = run(vas.delete(va.metadata.name.as_deref().unwrap(), &Default::default()));
            }
        }
    }
}

/// When a watch of its own (not kcsi's) sees the VolumeAttachment `name` attached.
fn seen_attached(name: &str) -> std::thread::JoinHandle<Instant> {
    use futures::StreamExt;
    let vas: Api<VolumeAttachment> = Api::all(admin().client.clone());
    let config = kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
    std::thread::spawn(move || {
        run(async move {
            let mut events = std::pin::pin!(kube::runtime::watcher(vas, config));
            while let Some(event) = events.next().await {
                if let Ok(
                    kube::runtime::watcher::Event::Apply(va)
                    | kube::runtime::watcher::Event::InitApply(va),
                ) = event
                {
                    if va.status.is_some_and(|s| s.attached) {
                        return Instant::now();
                    }
                }
            }
            panic!("the watch ended before the attachment was attached")
        })
    })
}

#[test]
fn attach_creates_the_attachment_and_returns_once_the_external_attacher_published_it() {
    let c = Cluster::new(&[]);
    let (handle, spec) = c.volume("att1");
    let seen = seen_attached(&c.va_name(&handle));
    let start = Instant::now();
    let name = c
        .attacher
        .attach(&spec, &c.node, 60_000)
        .unwrap_or_else(|e| {
            panic!(
                "attach: {e:?}\nexternal-attacher log:\n{}",
                c.attacher_log()
            )
        });
    let returned = Instant::now();
    let took = returned - start;
    // Read before anything else waits: Attach returned only once the attachment was attached.
    let va = c.va(&name).expect("the VolumeAttachment exists");
    assert!(
        va.status.as_ref().is_some_and(|s| s.attached),
        "Attach returned before the external-attacher attached: {va:?}"
    );
    let status_seen = seen.join().unwrap();
    assert_eq!(name, c.va_name(&handle));
    assert_eq!(va.spec.attacher, c.driver_name);
    assert_eq!(va.spec.node_name, c.node);
    let pv = spec["persistentVolume"]["metadata"]["name"]
        .as_str()
        .unwrap();
    assert_eq!(va.spec.source.persistent_volume_name.as_deref(), Some(pv));
    assert!(va.spec.source.inline_volume_spec.is_none());
    let publish = c.driver.last_request("ControllerPublishVolume");
    assert_eq!(publish["volume_id"], json!(handle), "{publish}");
    assert_eq!(publish["node_id"], json!(c.node), "{publish}");
    assert_eq!(
        c.attacher
            .volumes_are_attached(&json!([spec]), &c.node)
            .unwrap(),
        json!([true])
    );
    // Attaching again finds the attachment as it is and returns: nothing is created or changed.
    let again = Instant::now();
    assert_eq!(c.attacher.attach(&spec, &c.node, 10_000).unwrap(), name);
    let again = again.elapsed();
    let after = c.va(&name).expect("the VolumeAttachment exists");
    assert_eq!(after.metadata.uid, va.metadata.uid);

    println!(
        "attach through the real external-attacher: {took:?} from create to Attach returning, at {} relative to when a separate watch saw status.attached; again (already attached): {again:?}",
        if returned >= status_seen {
            format!("+{:?}", returned - status_seen)
        } else {
            format!("-{:?}", status_seen - returned)
        }
    );
}

#[test]
fn detach_deletes_the_attachment_and_waits_until_the_external_attacher_unpublished_it() {
    let c = Cluster::new(&[]);
    let (handle, spec) = c.volume("det1");
    let name = c.attacher.attach(&spec, &c.node, 60_000).expect("attach");
    c.attacher
        .detach(&c.volume_name(&handle), &c.node, 60_000)
        .unwrap_or_else(|e| panic!("detach: {e:?}\n{}", c.attacher_log()));
    assert!(c.va(&name).is_none(), "the VolumeAttachment is gone");
    let unpublish = c.driver.last_request("ControllerUnpublishVolume");
    assert_eq!(unpublish["volume_id"], json!(handle), "{unpublish}");
    assert_eq!(unpublish["node_id"], json!(c.node), "{unpublish}");
    assert_eq!(
        c.attacher
            .volumes_are_attached(&json!([spec]), &c.node)
            .unwrap(),
        json!([false])
    );
    // Gone already: done, without asking anything of the driver.
    c.attacher
        .detach(&c.volume_name(&handle), &c.node, 5_000)
        .expect("detach of an absent attachment");
    assert_eq!(c.driver.requests("ControllerUnpublishVolume").len(), 1);
}

#[test]
fn attach_beyond_the_drivers_attach_limit_fails_final_with_the_attach_error_verbatim() {
    let c = Cluster::new(&["-attach-limit=1"]);
    let (_, first) = c.volume("lim1");
    let (second_handle, second) = c.volume("lim2");
    c.attacher
        .attach(&first, &c.node, 60_000)
        .expect("the first volume fits the limit");
    let err = c.attacher.attach(&second, &c.node, 60_000).unwrap_err();
    let va = c
        .va(&c.va_name(&second_handle))
        .expect("the VolumeAttachment exists");
    let recorded = va
        .status
        .unwrap()
        .attach_error
        .expect("an attach error recorded");
    assert_eq!(err.result, KCSI_ERR_DRIVER, "{err:?}");
    assert_eq!(err.class, KCSI_CLASS_FINAL, "{err:?}");
    assert_eq!(Some(err.message.clone()), recorded.message, "{err:?}");
    assert!(err.message.contains("ResourceExhausted"), "{err:?}");
    // The driver's gRPC code, as the external-attacher recorded it: 8 = RESOURCE_EXHAUSTED.
    assert_eq!(err.grpc, 8, "{err:?}");
    assert_eq!(recorded.error_code, Some(8), "{recorded:?}");
}

#[test]
fn attach_without_an_external_attacher_times_out_transient_with_upstreams_message() {
    let api = ApiServer::shared();
    let node = unique("ctl-none");
    let host = Host::controller(&api.kubeconfig);
    let spec = json!({"persistentVolume": {"metadata": {"name": "pv-nobody"}, "spec": {"csi": {"driver": "nobody.example.com", "volumeHandle": "vol-nobody"}}}});
    let err = host.attacher().attach(&spec, &node, 700).unwrap_err();
    assert_eq!(err.result, KCSI_ERR_TIMEOUT, "{err:?}");
    assert_eq!(err.class, KCSI_CLASS_TRANSIENT, "{err:?}");
    assert_eq!(
        err.message,
        "timed out waiting for external-attacher of nobody.example.com CSI driver to attach volume vol-nobody"
    );
    // The attachment stays for the sidecar as nobody left it (not attached, no error); Detach
    // of exactly this volume and node removes it.
    let name = kcsi::attachment_name("vol-nobody", "nobody.example.com", &node);
    let vas: Api<VolumeAttachment> = Api::all(admin().client.clone());
    let va = run(vas.get_opt(&name))
        .unwrap()
        .expect("the VolumeAttachment stays");
    assert!(
        va.status
            .as_ref()
            .is_none_or(|s| !s.attached && s.attach_error.is_none()),
        "{va:?}"
    );
    host.attacher()
        .detach("nobody.example.com^vol-nobody", &node, 10_000)
        .expect("detach");
    assert!(run(vas.get_opt(&name)).unwrap().is_none());
}

#[test]
fn attach_waits_on_the_attachment_it_created_until_it_is_marked_attached() {
    let api = ApiServer::shared();
    let node = unique("ctl-wait");
    let host = Host::controller(&api.kubeconfig);
    let spec = json!({"persistentVolume": {"metadata": {"name": "pv-wait"}, "spec": {"csi": {"driver": "nobody.example.com", "volumeHandle": "vol-wait"}}}});
    let name = kcsi::attachment_name("vol-wait", "nobody.example.com", &node);
    let vas: Api<VolumeAttachment> = Api::all(admin().client.clone());
    let attacher = host.attacher();
    let waiting = std::thread::spawn({
        let node = node.clone();
        move || attacher.attach(&spec, &node, 60_000)
    });
    // The test plays the external-attacher: once the attachment exists, it marks it attached.
    common::wait_for("the VolumeAttachment", Duration::from_secs(30), || {
        run(vas.get_opt(&name)).unwrap().is_some()
    });
    let attached = json!({"status": {"attached": true}});
    run(vas.patch_status(&name, &PatchParams::default(), &Patch::Merge(&attached)))
        .expect("mark the VolumeAttachment attached");
    assert_eq!(waiting.join().unwrap().expect("attach"), name);
    host.attacher()
        .detach("nobody.example.com^vol-wait", &node, 10_000)
        .expect("detach");
    assert!(run(vas.get_opt(&name)).unwrap().is_none());
}

#[test]
fn detach_deletes_only_the_attachment_of_that_volume_and_node() {
    let api = ApiServer::shared();
    let node = unique("ctl-other");
    let vas: Api<VolumeAttachment> = Api::all(admin().client.clone());
    // Attachments kcsi did not create: same volume on another node, another volume here.
    let others = [("vol-keep", "other-node"), ("vol-other", node.as_str())];
    for (handle, on) in others {
        let va: VolumeAttachment = serde_json::from_value(json!({
            "metadata": {"name": kcsi::attachment_name(handle, "keep.example.com", on)},
            "spec": {"attacher": "keep.example.com", "nodeName": on, "source": {"persistentVolumeName": "pv-keep"}},
        }))
        .unwrap();
        run(vas.create(&PostParams::default(), &va)).expect("create VolumeAttachment");
    }
    let host = Host::controller(&api.kubeconfig);
    host.attacher()
        .detach("keep.example.com^vol-keep", &node, 5_000)
        .expect("detach of an absent attachment");
    for (handle, on) in others {
        let name = kcsi::attachment_name(handle, "keep.example.com", on);
        assert!(
            run(vas.get_opt(&name)).unwrap().is_some(),
            "{handle} on {on} is kept"
        );
        run(vas.delete(&name, &Default::default())).unwrap();
    }
}

#[test]
fn volumes_are_attached_answers_per_spec_from_the_watch_and_attach_not_required_is_attached() {
    let api = ApiServer::shared();
    let node = unique("ctl-vaa");
    let c = admin();
    let drivers: Api<CSIDriver> = Api::all(c.client.clone());
    let no_attach = format!("{node}.noattach.example.com");
    let d: CSIDriver = serde_json::from_value(
        json!({"metadata": {"name": no_attach}, "spec": {"attachRequired": false}}),
    )
    .unwrap();
    run(drivers.create(&PostParams::default(), &d)).expect("create CSIDriver");
    let vas: Api<VolumeAttachment> = Api::all(c.client.clone());
    let attached = kcsi::attachment_name("vol-a", "a.example.com", &node);
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": attached},
        "spec": {"attacher": "a.example.com", "nodeName": node, "source": {"persistentVolumeName": "pv-a"}},
    }))
    .unwrap();
    run(vas.create(&PostParams::default(), &va)).unwrap();
    run(vas.patch_status(
        &attached,
        &Default::default(),
        &kube::api::Patch::Merge(json!({"status": {"attached": true}})),
    ))
    .unwrap();
    let host = Host::controller(&api.kubeconfig);
    let spec = |driver: &str, handle: &str| json!({"persistentVolume": {"metadata": {"name": format!("pv-{handle}")}, "spec": {"csi": {"driver": driver, "volumeHandle": handle}}}});
    let specs = json!([
        spec("a.example.com", "vol-a"),
        spec("a.example.com", "vol-missing"),
        spec(&no_attach, "vol-na")
    ]);
    let a = host.attacher();
    common::wait_for(
        "the watch has the attachment",
        Duration::from_secs(10),
        || a.volumes_are_attached(&specs, &node).unwrap()[0] == true,
    );
    assert_eq!(
        a.volumes_are_attached(&specs, &node).unwrap(),
        json!([true, false, true])
    );
    assert_eq!(
        a.volumes_are_attached(&json!([]), &node).unwrap(),
        json!([])
    );
    run(vas.delete(&attached, &Default::default())).unwrap();
    run(drivers.delete(&no_attach, &Default::default())).unwrap();
}

/// A controller host on a kubeconfig whose server is never contacted by these calls.
fn offline_controller() -> (tempfile::TempDir, Host) {
    let dir = short_tempdir("kcsi-ctl");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let host = Host::controller(&kubeconfig);
    (dir, host)
}

#[test]
fn controller_host_refuses_node_calls_naming_them() {
    let (_dir, host) = offline_controller();
    let status = host.status();
    assert_eq!(status["role"], "controller", "{status}");
    assert_eq!(status["csiNodeInitialized"], false, "{status}");
    let spec = pv_spec("pv-1", "vol-1", false, json!({}), json!({}));
    let a = host.attacher();
    let errs = [
        (
            "kcsi_attacher_wait_for_attach",
            a.wait_for_attach(&spec, 100).unwrap_err(),
        ),
        (
            "kcsi_attacher_device_mount_path",
            a.device_mount_path(&spec).unwrap_err(),
        ),
        (
            "kcsi_attacher_unmount_device",
            a.unmount_device("/x/globalmount").unwrap_err(),
        ),
        (
            "kcsi_mounter_new",
            host.mounter(&spec, &pod("p", "u1")).err().unwrap(),
        ),
        (
            "kcsi_unmounter_new",
            host.unmounter("pv-1", "u1").err().unwrap(),
        ),
        (
            "kcsi_block_mapper_new",
            host.mapper(&spec, &pod("p", "u1")).unwrap_err(),
        ),
        ("kcsi_node_expand", host.expand(&json!({})).unwrap_err()),
        (
            "kcsi_construct_volume_spec",
            host.construct(std::path::Path::new("/x")).unwrap_err(),
        ),
    ];
    for (call, err) in errs {
        assert_eq!(err.result, KCSI_ERR_NOT_SUPPORTED, "{call}: {err:?}");
        assert!(err.message.contains(call), "{call}: {}", err.message);
    }
    let (name, endpoint) = (cstr("d.example.com"), cstr("/tmp/none.sock"));
    let err = call(|e| {
        kcsi::ffi::registration::kcsi_register_plugin(
            host.ptr,
            name.as_ptr(),
            endpoint.as_ptr(),
            std::ptr::null(),
            0,
            100,
            e,
        )
    })
    .unwrap_err();
    assert_eq!(err.result, KCSI_ERR_NOT_SUPPORTED, "{err:?}");
    assert!(
        err.message.contains("kcsi_register_plugin"),
        "{}",
        err.message
    );
}

#[test]
fn node_host_refuses_attach_detach_and_volumes_are_attached() {
    let host = Host::new(json!({}));
    let a = host.attacher();
    let spec = pv_spec("pv-1", "vol-1", false, json!({}), json!({}));
    let err = a.attach(&spec, "node-1", 100).unwrap_err();
    assert_eq!(err.result, KCSI_ERR_NOT_SUPPORTED, "{err:?}");
    assert!(
        err.message.contains("kcsi_attacher_attach"),
        "{}",
        err.message
    );
    assert!(
        err.message
            .contains("attaching volumes from the kubelet is not supported"),
        "{}",
        err.message
    );
    let err = a.detach("d^h", "node-1", 100).unwrap_err();
    assert_eq!(err.result, KCSI_ERR_NOT_SUPPORTED, "{err:?}");
    assert!(
        err.message
            .contains("detaching volumes from the kubelet is not supported"),
        "{}",
        err.message
    );
    let err = a
        .volumes_are_attached(&json!([spec]), "node-1")
        .unwrap_err();
    assert_eq!(err.result, KCSI_ERR_NOT_SUPPORTED, "{err:?}");
    assert!(
        err.message.contains("kcsi_attacher_volumes_are_attached"),
        "{}",
        err.message
    );
}

#[test]
fn controller_calls_name_their_bad_input() {
    let (_dir, host) = offline_controller();
    let a = host.attacher();
    let spec = pv_spec("pv-1", "vol-1", false, json!({}), json!({}));
    let inline = json!({"volume": {"name": "v", "csi": {"driver": "d"}}});
    let cases = [
        ("node_name", a.attach(&spec, "", 100).unwrap_err()),
        (
            "CSIPersistentVolumeSource",
            a.attach(&inline, "n", 100).unwrap_err(),
        ),
        (
            "volume source not found",
            a.attach(&json!({}), "n", 100).unwrap_err(),
        ),
        ("volume_name", a.detach("no-caret", "n", 100).unwrap_err()),
        ("volume_name", a.detach("a^b^c", "n", 100).unwrap_err()),
        ("volume_name", a.detach("", "n", 100).unwrap_err()),
        ("node_name", a.detach("d^h", "", 100).unwrap_err()),
        (
            "specs_json is not a JSON array",
            a.volumes_are_attached(&spec, "n").unwrap_err(),
        ),
        (
            "specs_json[1] is null",
            a.volumes_are_attached(&json!([spec, null]), "n")
                .unwrap_err(),
        ),
        (
            "specs_json[0]",
            a.volumes_are_attached(&json!([inline]), "n").unwrap_err(),
        ),
        (
            "node_name",
            a.volumes_are_attached(&json!([spec]), "").unwrap_err(),
        ),
    ];
    for (named, err) in cases {
        assert_eq!(err.result, KCSI_ERR_INVALID_ARGUMENT, "{named}: {err:?}");
        assert!(err.message.contains(named), "{named}: {}", err.message);
    }
}
