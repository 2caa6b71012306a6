//! The plain spec form (`{"csi": {...}}`) through the C API gives the same paths and the same
//! `vol_data.json` files as the equivalent PersistentVolume, against the real hostpath driver:
//! staged, published and block volumes, each form on its own root.

use kcsi_testkit as common;

use std::path::Path;
use std::ptr;

use common::capi::{check, config, cstr, no_attach, pod, pv_spec, take_string, Host as CHost};
use common::{short_tempdir, unmount_below, DriverProcess, DRIVER};
use kcsi::ffi::mounter::*;
use serde_json::{json, Value};

struct Node {
    host: CHost,
    root: tempfile::TempDir,
}

impl Node {
    fn new(driver: &DriverProcess) -> Node {
        let root = short_tempdir("kcsi-root");
        let host = CHost::from_config(&config(root.path(), no_attach(json!({}))));
        host.register(DRIVER, &driver.endpoint());
        Node { host, root }
    }

    /// A path under this root, as the same path under any root.
    fn relative(&self, path: &str) -> String {
        path.strip_prefix(&self.root.path().display().to_string())
            .unwrap_or_else(|| panic!("{path} is not below the root"))
            .to_string()
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(format!("{}{relative}", self.root.path().display()))
            .unwrap_or_else(|e| panic!("{relative}: {e}"))
    }

    /// Stage and publish `spec`; what each left on disk, relative to the root.
    fn set_up(&self, spec: &Value) -> (String, String, String, String) {
        let a = self.host.attacher();
        let dmp = a.device_mount_path(spec).unwrap();
        a.mount_device(spec, &dmp, None).unwrap();
        let global = self.read(&format!(
            "{}/vol_data.json",
            Path::new(&self.relative(&dmp)).parent().unwrap().display()
        ));
        let (s, p) = (
            cstr(&spec.to_string()),
            cstr(&pod("p", "pod-1").to_string()),
        );
        let mut m = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi_mounter_new(self.host.ptr, s.as_ptr(), p.as_ptr(), &mut m, &mut err),
            err,
        )
        .unwrap();
        let mut out = ptr::null_mut();
        check(kcsi_mounter_path(m, &mut out, &mut err), err).unwrap();
        let mount = self.relative(&take_string(out));
        check(kcsi_mounter_set_up(m, ptr::null(), &mut err), err).unwrap();
        kcsi_mounter_free(m);
        let published = self.read(&format!(
            "{}/vol_data.json",
            Path::new(&mount).parent().unwrap().display()
        ));
        (self.relative(&dmp), global, mount, published)
    }

    fn tear_down(&self, spec_name: &str, dmp: &str) {
        let (s, u) = (cstr(spec_name), cstr("pod-1"));
        let mut un = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi_unmounter_new(self.host.ptr, s.as_ptr(), u.as_ptr(), &mut un, &mut err),
            err,
        )
        .unwrap();
        check(kcsi_unmounter_tear_down(un, &mut err), err).unwrap();
        kcsi_unmounter_free(un);
        let dmp = format!("{}{dmp}", self.root.path().display());
        self.host.attacher().unmount_device(&dmp).unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        unmount_below(self.root.path());
    }
}

#[test]
fn plain_spec_gives_the_pv_paths_and_vol_data() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let handle = driver.create_volume("plain-fs", false, 8 << 20);
    let attrs = json!({"color": "blue"});
    let pv = pv_spec(
        "pv-plain",
        &handle,
        false,
        json!({"volumeAttributes": attrs}),
        json!({}),
    );
    let plain = json!({"csi": {
        "driver": DRIVER, "volumeHandle": handle, "specName": "pv-plain",
        "volumeAttributes": attrs, "accessMode": "ReadWriteOnce",
    }});
    let (a, b) = (Node::new(&driver), Node::new(&driver));
    let from_pv = a.set_up(&pv);
    a.tear_down("pv-plain", &from_pv.0);
    let from_plain = b.set_up(&plain);
    assert_eq!(from_plain, from_pv);
    assert!(
        from_pv.3.contains("\"specVolID\":\"pv-plain\""),
        "{}",
        from_pv.3
    );
    b.tear_down("pv-plain", &from_plain.0);

    let head = |h: &CHost, spec: &Value| {
        let s = cstr(&spec.to_string());
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        check(
            kcsi::ffi::queries::kcsi_get_volume_name(h.ptr, s.as_ptr(), &mut out, &mut err),
            err,
        )
        .unwrap();
        take_string(out)
    };
    assert_eq!(head(&a.host, &plain), head(&a.host, &pv));
}

#[test]
fn plain_block_spec_gives_the_pv_block_paths_and_vol_data() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let handle = driver.create_volume("plain-block", true, 8 << 20);
    let pv = pv_spec("pv-block", &handle, true, json!({}), json!({}));
    let plain = json!({"csi": {"driver": DRIVER, "volumeHandle": handle, "specName": "pv-block", "volumeMode": "Block"}});
    let mut seen = Vec::new();
    for spec in [&pv, &plain] {
        let node = Node::new(&driver);
        let m = node.host.mapper(spec, &pod("p", "pod-1")).unwrap();
        let paths = m.paths();
        let relative: Vec<String> = [
            "globalMapPath",
            "stagingPath",
            "publishPath",
            "volumeDataDir",
        ]
        .iter()
        .map(|k| node.relative(paths[k].as_str().unwrap()))
        .collect();
        let data = node.read(&format!("{}/vol_data.json", relative[3]));
        seen.push((relative, data));
    }
    assert_eq!(seen[0], seen[1]);
}

#[test]
fn plain_spec_secrets_reach_the_driver_and_a_bad_secrets_file_is_transient() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let handle = driver.create_volume("plain-secrets", false, 8 << 20);
    let node = Node::new(&driver);
    let secrets = node.root.path().join("secrets.json");
    let spec = json!({"csi": {"driver": DRIVER, "volumeHandle": handle, "specName": "pv-s",
        "secretsFile": secrets}});
    let a = node.host.attacher();
    let dmp = a.device_mount_path(&spec).unwrap();
    let err = a.mount_device(&spec, &dmp, None).unwrap_err();
    assert_eq!(err.class, kcsi::ffi::KCSI_CLASS_TRANSIENT, "{err:?}");
    assert!(err.message.contains("cannot read secrets file"), "{err:?}");
    std::fs::write(
        &secrets,
        r#"{"NodeStageVolumeSecret": {"password": "hunter2"}}"#,
    )
    .unwrap();
    a.mount_device(&spec, &dmp, None).unwrap();
    // hostpathplugin's gRPCCall log line prints the secrets it received (its own leak).
    let log = driver.log();
    assert!(log.contains(r#""secrets":{"password":"hunter2"}"#), "{log}");
    a.unmount_device(&dmp).unwrap();
}
