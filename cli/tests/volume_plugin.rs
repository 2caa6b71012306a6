//! `kcsi volume-plugin` through its HTTP API (the Docker volume plugin protocol, as Docker and
//! Podman call it) against the real csi-driver-host-path: one stage and one publish per
//! caller, Mount calls counted per caller, serialised calls, restart after SIGKILL with the
//! counts kept, attaching (hostpath `-enable-attach`, `-attach-limit`) with a SIGKILL between
//! its steps (held there by `kcsi fault-proxy`), Create's options and secrets as the driver
//! receives them, and bad input answered with a clear `Err` without touching the state on
//! disk. Every test checks no mount is left.

use kcsi_testkit as common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{
    mount_capability, mounts_below, short_tempdir, unmount_below, wait_for, DriverProcess,
};
use serde_json::{json, Value};

/// A running plugin on its own root and socket, in front of a real hostpath driver (through
/// `kcsi fault-proxy` while `proxy` runs).
struct Plugin {
    dir: tempfile::TempDir,
    driver: DriverProcess,
    child: Option<Child>,
    args: Vec<String>,
    proxy: Option<Child>,
}

impl Plugin {
    fn start() -> Plugin {
        Plugin::start_with(&[], &[], &[])
    }

    /// The driver started with `driver_flags`, the plugin with `args`, through a fault proxy
    /// firing `faults` when there are any.
    fn start_with(driver_flags: &[&str], args: &[&str], faults: &[&str]) -> Plugin {
        let mut p = Plugin {
            dir: short_tempdir("kcsi-vp"),
            driver: DriverProcess::hostpath("kcsi-node", driver_flags),
            child: None,
            args: args.iter().map(|a| a.to_string()).collect(),
            proxy: None,
        };
        if !faults.is_empty() {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_kcsi"));
            cmd.arg("fault-proxy")
                .arg("--listen")
                .arg(p.proxy_socket())
                .arg("--upstream")
                .arg(&p.driver.socket);
            for f in faults {
                cmd.args(["--fault", f]);
            }
            let proxy = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start kcsi fault-proxy");
            p.proxy = Some(proxy);
            let socket = p.proxy_socket();
            wait_for("the fault proxy's socket", Duration::from_secs(20), || {
                UnixStream::connect(&socket).is_ok()
            });
        }
        p.spawn();
        p
    }

    fn proxy_socket(&self) -> PathBuf {
        self.dir.path().join("proxy.sock")
    }

    /// Stops the fault proxy: the next `spawn` talks to the driver itself.
    fn stop_proxy(&mut self) {
        if let Some(mut c) = self.proxy.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("kcsi.sock")
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("plugin.log"))
            .unwrap();
        let endpoint = match self.proxy {
            Some(_) => self.proxy_socket(),
            None => self.driver.socket.clone(),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_kcsi"))
            .arg("volume-plugin")
            .arg("--endpoint")
            .arg(format!("unix://{}", endpoint.display()))
            .args(["--name", "kcsi"])
            .arg("--root")
            .arg(self.root())
            .arg("--listen")
            .arg(self.socket())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kcsi volume-plugin");
        self.child = Some(child);
        let socket = self.socket();
        wait_for("the plugin's socket", Duration::from_secs(20), || {
            UnixStream::connect(&socket).is_ok()
        });
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("plugin.log")).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// One POST: (HTTP status, JSON body).
    fn call(&self, endpoint: &str, body: &str) -> (u16, Value) {
        raw(&self.socket(), &post(endpoint, body))
    }

    /// A call that must succeed: its JSON body, with `Err` empty.
    fn ok(&self, endpoint: &str, body: Value) -> Value {
        let (status, v) = self.call(endpoint, &body.to_string());
        assert_eq!(
            status,
            200,
            "{endpoint} {body}: {v}\nplugin log:\n{}",
            self.log()
        );
        assert_eq!(v["Err"], "", "{endpoint}: {v}");
        v
    }

    /// A call that must fail: its `Err`.
    fn err(&self, endpoint: &str, body: Value) -> String {
        let (status, v) = self.call(endpoint, &body.to_string());
        assert_ne!(status, 200, "{endpoint} {body} must fail: {v}");
        let e = v["Err"].as_str().unwrap_or_default().to_string();
        assert!(!e.is_empty(), "{endpoint} {body}: no Err in {v}");
        e
    }

    fn mount(&self, name: &str, id: &str) -> PathBuf {
        let v = self.ok("/VolumeDriver.Mount", json!({"Name": name, "ID": id}));
        PathBuf::from(v["Mountpoint"].as_str().unwrap())
    }

    fn create(&self, name: &str, opts: Value) {
        self.ok("/VolumeDriver.Create", json!({"Name": name, "Opts": opts}));
    }

    fn unmount(&self, name: &str, id: &str) {
        self.ok("/VolumeDriver.Unmount", json!({"Name": name, "ID": id}));
    }

    /// (NodeStageVolume, NodePublishVolume) calls so far.
    fn set_up(&self) -> (usize, usize) {
        (
            self.calls("NodeStageVolume"),
            self.calls("NodePublishVolume"),
        )
    }

    /// (NodeUnpublishVolume, NodeUnstageVolume) calls so far.
    fn torn_down(&self) -> (usize, usize) {
        (
            self.calls("NodeUnpublishVolume"),
            self.calls("NodeUnstageVolume"),
        )
    }

    fn description(&self, name: &str) -> Value {
        let path = self.root().join("volumes").join(format!("{name}.json"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn handle(&self, name: &str) -> String {
        self.description(name)["volumeHandle"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn calls(&self, method: &str) -> usize {
        self.driver.calls(method).len()
    }

    fn files_on_disk(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.root(), &mut out);
        out.sort();
        out
    }

    fn assert_no_mounts(&self) {
        assert_eq!(mounts_below(self.dir.path()), Vec::<PathBuf>::new());
    }

    /// The driver's successful calls in order, as (method, request, response), from its log.
    fn sequence(&self) -> Vec<(String, Value, Value)> {
        self.driver
            .log()
            .lines()
            .filter_map(|l| l.split_once("gRPCCall: "))
            .filter_map(|(_, json)| serde_json::from_str::<Value>(json).ok())
            .filter(|c| c["Error"] == "")
            .map(|c| {
                let m = c["Method"].as_str().unwrap_or_default();
                let m = m.rsplit('/').next().unwrap_or_default().to_string();
                (m, c["Request"].clone(), c["Response"].clone())
            })
            .collect()
    }

    /// The methods of [`Self::sequence`] on volume `handle`, in order.
    fn methods_on(&self, handle: &str) -> Vec<String> {
        self.sequence()
            .into_iter()
            .filter(|(_, req, _)| req["volume_id"] == handle)
            .map(|(m, _, _)| m)
            .collect()
    }

    /// Whether the driver holds volume `handle` attached (its own state.json).
    fn attached(&self, handle: &str) -> bool {
        let path = self.driver.dir.path().join("state/state.json");
        let state: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let v = state["Volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["VolID"] == handle)
            .unwrap_or_else(|| panic!("no volume {handle} in the driver's state: {state}"));
        v["Attached"]
            .as_bool()
            .expect("hostpath's state has Attached")
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.kill();
        self.stop_proxy();
        unmount_below(self.dir.path());
    }
}

fn walk(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path().display().to_string());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&e.path(), out);
        }
    }
}

fn post(endpoint: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {endpoint} HTTP/1.1\r\nHost: plugin\r\nContent-Type: \
         application/vnd.docker.plugins.v1.1+json\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends `request` as is; the status and JSON body of the answer.
fn raw(socket: &Path, request: &[u8]) -> (u16, Value) {
    let mut s = UnixStream::connect(socket).expect("connect to the plugin");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // The plugin may answer (and close) before taking all of an oversized body: then the
    // answer comes, and the read after it gets the reset of a close with data unread.
    let _ = s.write_all(request);
    let mut buf = Vec::new();
    if let Err(e) = s.read_to_end(&mut buf) {
        assert!(
            e.kind() == std::io::ErrorKind::ConnectionReset && !buf.is_empty(),
            "reading the answer: {e}"
        );
    }
    let text = String::from_utf8(buf).expect("an HTTP answer in UTF-8");
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    (status, v)
}

#[test]
fn activate_and_capabilities_answer_a_local_volume_driver() {
    let p = Plugin::start();
    let v = p.ok("/Plugin.Activate", json!({}));
    assert_eq!(v["Implements"], json!(["VolumeDriver"]));
    let v = p.ok("/VolumeDriver.Capabilities", json!({}));
    assert_eq!(v["Capabilities"]["Scope"], "local");
    // Podman sends List with no body at all.
    let (status, v) = p.call("/VolumeDriver.List", "");
    assert_eq!((status, v), (200, json!({"Volumes": [], "Err": ""})));
}

#[test]
fn two_callers_share_one_stage_and_get_one_publish_each() {
    let p = Plugin::start();
    p.create("data", json!({"size": "10Mi", "attribute.tier": "gold"}));
    let d = p.description("data");
    assert_eq!(d["createdByKcsi"], true);
    assert_eq!(d["capacityBytes"], 10 << 20);
    assert_eq!(d["attributes"]["tier"], "gold");
    assert_eq!(p.calls("CreateVolume"), 1);

    let a = p.mount("data", "container-a");
    let b = p.mount("data", "container-b");
    assert_ne!(a, b);
    assert_eq!(p.set_up(), (1, 2));
    let mounted = mounts_below(&p.root());
    for m in [&a, &b] {
        assert!(mounted.contains(m), "{m:?} in {mounted:?}");
    }
    // The same caller again is the same publish, counted: Docker's `docker cp` does this.
    assert_eq!(p.mount("data", "container-a"), a);
    assert_eq!(p.calls("NodePublishVolume"), 2);
    p.unmount("data", "container-a");
    assert_eq!(p.torn_down(), (0, 0), "the nested Unmount unpublished");
    let ctx = &p.driver.last_request("NodePublishVolume")["volume_context"];
    assert_eq!(ctx["tier"], "gold", "{ctx}");

    // Bytes written by one caller are the driver's, and the other caller's.
    std::fs::write(a.join("hello.txt"), b"from a").unwrap();
    assert_eq!(std::fs::read(b.join("hello.txt")).unwrap(), b"from a");
    let stored = p.driver.volume_path(&p.handle("data")).join("hello.txt");
    assert_eq!(std::fs::read(stored).unwrap(), b"from a");

    let got = p.ok("/VolumeDriver.Get", json!({"Name": "data"}));
    assert_eq!(
        got["Volume"]["Status"]["mounts"].as_array().unwrap().len(),
        2
    );
    assert_eq!(got["Volume"]["Status"]["staged"], true);
    assert!(!got["Volume"]["Mountpoint"].as_str().unwrap().is_empty());

    let e = p.err("/VolumeDriver.Remove", json!({"Name": "data"}));
    assert!(
        e.contains("is mounted for 2 caller(s)") && e.contains("FailedPrecondition"),
        "{e}"
    );

    p.unmount("data", "container-a");
    assert_eq!(p.torn_down(), (1, 0));
    p.unmount("data", "container-b");
    assert_eq!(p.torn_down(), (2, 1));
    p.assert_no_mounts();
    let path = p.ok("/VolumeDriver.Path", json!({"Name": "data"}));
    assert_eq!(path["Mountpoint"], "");

    p.ok("/VolumeDriver.Remove", json!({"Name": "data"}));
    assert_eq!(p.calls("DeleteVolume"), 1);
    assert!(p.driver.volumes().is_empty());
    let list = p.ok("/VolumeDriver.List", json!({}));
    assert_eq!(list["Volumes"], json!([]));
    // Nothing is left of the callers or the volume but the empty top dirs.
    let left: Vec<String> = p
        .files_on_disk()
        .into_iter()
        .filter(|f| f.contains("/pods/") || f.contains("/volumes/"))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

/// `callers` calls of `endpoint` on volume `name` at once, one caller ID each; all succeed.
fn all_at_once(p: &Plugin, endpoint: &'static str, name: &str, callers: usize) {
    let threads: Vec<_> = (0..callers)
        .map(|i| {
            let socket = p.socket();
            let body = json!({"Name": name, "ID": format!("c{i}")}).to_string();
            std::thread::spawn(move || raw(&socket, &post(endpoint, &body)))
        })
        .collect();
    for t in threads {
        let (status, v) = t.join().unwrap();
        assert_eq!(status, 200, "{endpoint}: {v}");
    }
}

#[test]
fn concurrent_mounts_of_one_volume_are_serialised() {
    let p = Plugin::start();
    p.create("shared", json!({"size": "1Mi"}));
    all_at_once(&p, "/VolumeDriver.Mount", "shared", 6);
    assert_eq!(p.set_up(), (1, 6));
    all_at_once(&p, "/VolumeDriver.Unmount", "shared", 6);
    assert_eq!(p.torn_down(), (6, 1));
    p.assert_no_mounts();
    p.ok("/VolumeDriver.Remove", json!({"Name": "shared"}));
}

#[test]
fn nested_mounts_of_one_caller_keep_its_publish_until_they_balance() {
    let p = Plugin::start();
    p.create("nested", json!({"size": "1Mi"}));
    // `docker run`, then `docker cp` into the running container: Mount, Mount, Unmount.
    let path = p.mount("nested", "container");
    assert_eq!(p.mount("nested", "container"), path);
    p.unmount("nested", "container");
    assert_eq!(p.set_up(), (1, 1));
    assert_eq!(p.torn_down(), (0, 0));
    assert!(mounts_below(&p.root()).contains(&path));
    let got = p.ok("/VolumeDriver.Get", json!({"Name": "nested"}));
    assert_eq!(got["Volume"]["Status"]["mounts"][0]["mountCalls"], 1);
    // `docker stop`: the Unmount that balances the first Mount.
    p.unmount("nested", "container");
    assert_eq!(p.torn_down(), (1, 1));
    // A repeated Unmount finds nothing to do.
    p.unmount("nested", "container");
    assert_eq!(p.torn_down(), (1, 1));
    p.assert_no_mounts();
    p.ok("/VolumeDriver.Remove", json!({"Name": "nested"}));
}

#[test]
fn killed_plugin_finds_its_mounts_and_their_counts_again() {
    let mut p = Plugin::start();
    p.create("keep", json!({"size": "1Mi"}));
    let path = p.mount("keep", "c1");
    assert_eq!(p.mount("keep", "c1"), path);
    std::fs::write(path.join("f"), b"kept").unwrap();
    p.kill();
    assert!(mounts_below(&p.root()).contains(&path));

    p.spawn();
    let got = p.ok("/VolumeDriver.Get", json!({"Name": "keep"}));
    assert_eq!(got["Volume"]["Mountpoint"], path.display().to_string());
    assert_eq!(got["Volume"]["Status"]["mounts"][0]["error"], Value::Null);
    // Mount for the same caller is the publish that survived, not a new one.
    assert_eq!(p.mount("keep", "c1"), path);
    assert_eq!(p.calls("NodePublishVolume"), 1);
    p.err("/VolumeDriver.Remove", json!({"Name": "keep"}));

    // Three Mounts, two before the kill: two Unmounts leave the caller's publish.
    p.unmount("keep", "c1");
    p.unmount("keep", "c1");
    assert_eq!(p.torn_down(), (0, 0));
    assert_eq!(std::fs::read(path.join("f")).unwrap(), b"kept");
    p.kill();
    p.spawn();
    p.unmount("keep", "c1");
    assert_eq!(p.torn_down(), (1, 1));
    p.assert_no_mounts();
    p.ok("/VolumeDriver.Remove", json!({"Name": "keep"}));
    assert_eq!(p.calls("DeleteVolume"), 1);
}

#[test]
fn hostile_caller_ids_become_a_digest_not_a_path() {
    let p = Plugin::start();
    p.create("v", json!({"size": "1Mi"}));
    for id in ["../../../etc", "a/b", "", "x\ny"] {
        let path = p.mount("v", id);
        let pods = p.root().join("kubelet/pods");
        let uid = path.strip_prefix(&pods).unwrap().iter().next().unwrap();
        assert!(uid.to_str().unwrap().starts_with("id-"), "{id:?}: {path:?}");
        p.ok("/VolumeDriver.Unmount", json!({"Name": "v", "ID": id}));
    }
    assert_eq!(p.calls("NodePublishVolume"), 4);
    p.assert_no_mounts();
    p.ok("/VolumeDriver.Remove", json!({"Name": "v"}));
}

#[test]
fn a_given_volume_handle_is_used_and_never_deleted() {
    let p = Plugin::start();
    let id = p.driver.create_volume("outside", false, 1 << 20);
    p.create("given", json!({"volumeHandle": id}));
    assert_eq!(p.description("given")["createdByKcsi"], false);
    assert_eq!(p.calls("CreateVolume"), 1, "only the test's own");
    let path = p.mount("given", "c");
    std::fs::write(path.join("x"), b"1").unwrap();
    assert!(p.driver.volume_path(&id).join("x").exists());
    p.unmount("given", "c");
    p.ok("/VolumeDriver.Remove", json!({"Name": "given"}));
    assert_eq!(p.calls("DeleteVolume"), 0);
    assert_eq!(p.driver.volumes().len(), 1);
    p.driver.delete_volume(&id);
    p.assert_no_mounts();
}

#[test]
fn a_block_volume_is_published_as_a_device_per_caller() {
    let p = Plugin::start();
    p.create("raw", json!({"size": "4Mi", "block": "true"}));
    let dev = p.mount("raw", "c");
    let meta = std::fs::metadata(&dev).unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(meta.file_type().is_block_device(), "{dev:?}: {meta:?}");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&dev)
        .unwrap()
        .write_all(b"raw bytes")
        .unwrap();
    let mut back = [0u8; 9];
    std::fs::File::open(&dev)
        .unwrap()
        .read_exact(&mut back)
        .unwrap();
    assert_eq!(&back, b"raw bytes");
    p.unmount("raw", "c");
    assert_eq!(p.torn_down(), (1, 1));
    p.ok("/VolumeDriver.Remove", json!({"Name": "raw"}));
    p.assert_no_mounts();
}

#[test]
fn bad_input_gets_a_clear_err_and_leaves_the_state_alone() {
    let p = Plugin::start();
    p.create("good", json!({"size": "1Mi"}));
    let before = p.files_on_disk();
    let description = p.description("good");

    for name in ["../x", "a/b", "", ".hidden", "x\ny", "-x"] {
        for endpoint in ["Create", "Mount", "Unmount", "Remove", "Get", "Path"] {
            let e = p.err(
                &format!("/VolumeDriver.{endpoint}"),
                json!({"Name": name, "ID": "c"}),
            );
            assert!(
                e.contains("is not valid") && e.contains("InvalidArgument"),
                "{endpoint} {name:?}: {e}"
            );
        }
    }
    for (opts, needle) in [
        (json!({"size": "lots"}), "option size=\"lots\" is not valid"),
        (json!({"size": "0"}), "more than 0 bytes"),
        (json!({"block": "maybe"}), "true or false"),
        (
            json!({"size": "1Gi", "volumeHandle": "h"}),
            "exclude each other",
        ),
        (json!({"fsType": "ext4 -o x"}), "letters and digits"),
        (json!({"tier": "gold"}), "option \"tier\" is not known"),
        (
            json!({"accessMode": "rwx"}),
            "option accessMode=\"rwx\" is not valid",
        ),
        (json!({"secrets": "team"}), "started without --secrets-dir"),
    ] {
        let e = p.err("/VolumeDriver.Create", json!({"Name": "bad", "Opts": opts}));
        assert!(
            e.contains(needle) && e.contains("class final"),
            "{opts}: {e}"
        );
    }
    let e = p.err(
        "/VolumeDriver.Create",
        json!({"Name": "good", "Opts": {"size": "2Mi"}}),
    );
    assert!(
        e.contains("already exists") && e.contains("AlreadyExists"),
        "{e}"
    );
    // The same Create again is no change.
    p.create("good", json!({"size": "1Mi"}));

    for endpoint in ["Mount", "Unmount", "Remove", "Get", "Path"] {
        let e = p.err(
            &format!("/VolumeDriver.{endpoint}"),
            json!({"Name": "nope", "ID": "c"}),
        );
        assert!(
            e.contains("no such volume: nope") && e.contains("NotFound"),
            "{endpoint}: {e}"
        );
    }
    let (status, v) = p.call("/VolumeDriver.Mount", "{not json");
    assert_eq!(status, 400, "{v}");
    assert!(v["Err"].as_str().unwrap().contains("not its JSON"), "{v}");
    let (status, v) = p.call("/VolumeDriver.Mount", r#"{"Name": 7}"#);
    assert_eq!(status, 400, "{v}");
    let (status, v) = p.call("/VolumeDriver.Explode", "{}");
    assert_eq!(status, 404, "{v}");
    let (status, v) = raw(
        &p.socket(),
        b"GET /VolumeDriver.List HTTP/1.1\r\nHost: plugin\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status, 405, "{v}");
    let big = format!(
        r#"{{"Name": "big", "Opts": {{"attribute.k": "{}"}}}}"#,
        "x".repeat(2 << 20)
    );
    let (status, v) = p.call("/VolumeDriver.Create", &big);
    assert_eq!(status, 400, "{v}");

    // A description someone else broke is named, not trusted.
    let broken = p.root().join("volumes/broken.json");
    std::fs::write(&broken, "{garbage").unwrap();
    let e = p.err("/VolumeDriver.Get", json!({"Name": "broken"}));
    assert!(e.contains("is not valid"), "{e}");
    let list = p.ok("/VolumeDriver.List", json!({}));
    assert_eq!(list["Volumes"], json!([{"Name": "good", "Mountpoint": ""}]));
    std::fs::remove_file(broken).unwrap();

    assert_eq!(p.files_on_disk(), before);
    assert_eq!(p.description("good"), description);
    assert_eq!(p.calls("CreateVolume"), 1);
    p.ok("/VolumeDriver.Remove", json!({"Name": "good"}));
    p.assert_no_mounts();
}

#[test]
fn an_attach_required_volume_is_published_to_the_node_before_its_first_stage_and_unpublished_after_its_last_unstage(
) {
    let p = Plugin::start_with(&["-enable-attach"], &[], &[]);
    p.create("att", json!({"size": "1Mi"}));
    let h = p.handle("att");
    let a = p.mount("att", "c1");
    p.mount("att", "c2");
    std::fs::write(a.join("f"), b"attached").unwrap();
    assert_eq!(
        std::fs::read(p.driver.volume_path(&h).join("f")).unwrap(),
        b"attached"
    );
    assert_eq!(
        p.methods_on(&h),
        [
            "ControllerPublishVolume",
            "NodeStageVolume",
            "NodePublishVolume",
            "NodePublishVolume"
        ]
    );
    assert!(p.attached(&h));
    let seq = p.sequence();
    let (_, _, info) = seq.iter().find(|(m, _, _)| m == "NodeGetInfo").unwrap();
    let (_, publish, answer) = seq
        .iter()
        .find(|(m, _, _)| m == "ControllerPublishVolume")
        .unwrap();
    assert_eq!(publish["node_id"], info["node_id"], "NodeGetInfo's node ID");
    assert_eq!(publish["node_id"], "kcsi-node");
    // What ControllerPublishVolume answered is what NodeStage and NodePublish carry.
    let context = if answer["publish_context"].is_null() {
        json!({})
    } else {
        answer["publish_context"].clone()
    };
    for (m, req, _) in seq.iter().filter(|(_, r, _)| r["volume_id"] == h.as_str()) {
        if m == "NodeStageVolume" || m == "NodePublishVolume" {
            let got = if req["publish_context"].is_null() {
                json!({})
            } else {
                req["publish_context"].clone()
            };
            assert_eq!(got, context, "{m}: {req}");
        }
    }

    p.unmount("att", "c1");
    assert!(p.attached(&h), "detached while c2 uses it");
    p.unmount("att", "c2");
    assert_eq!(
        p.methods_on(&h)[4..],
        [
            "NodeUnpublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
            "ControllerUnpublishVolume"
        ]
    );
    assert_eq!(
        p.driver.last_request("ControllerUnpublishVolume")["node_id"],
        "kcsi-node"
    );
    assert!(!p.attached(&h));
    p.assert_no_mounts();
    p.ok("/VolumeDriver.Remove", json!({"Name": "att"}));
    assert_eq!(p.methods_on(&h).last().unwrap(), "DeleteVolume");
}

#[test]
fn the_drivers_attach_limit_refuses_a_second_volume_and_leaves_it_neither_attached_nor_staged() {
    let p = Plugin::start_with(&["-enable-attach", "-attach-limit=1"], &[], &[]);
    p.create("one", json!({"size": "1Mi"}));
    p.create("two", json!({"size": "1Mi"}));
    let (h1, h2) = (p.handle("one"), p.handle("two"));
    p.mount("one", "c");
    let e = p.err("/VolumeDriver.Mount", json!({"Name": "two", "ID": "c"}));
    assert!(
        e.contains("cannot attach volume two") && e.contains("ResourceExhausted"),
        "{e}"
    );
    assert!(!p.attached(&h2));
    assert_eq!(p.calls("NodeStageVolume"), 1, "two was staged");
    p.unmount("one", "c");
    assert!(!p.attached(&h1));
    // The limit is free again: two attaches now.
    let path = p.mount("two", "c");
    assert!(p.attached(&h2));
    std::fs::write(path.join("f"), b"2").unwrap();
    p.unmount("two", "c");
    assert!(!p.attached(&h2));
    p.assert_no_mounts();
    p.ok("/VolumeDriver.Remove", json!({"Name": "one"}));
    p.ok("/VolumeDriver.Remove", json!({"Name": "two"}));
}

/// `endpoint` (Mount, Unmount) on `name` for caller `c`, in a thread that ends when the plugin
/// answers or dies.
fn in_background(p: &Plugin, endpoint: &'static str, name: &str) -> std::thread::JoinHandle<()> {
    let socket = p.socket();
    let body = json!({"Name": name, "ID": "c"}).to_string();
    std::thread::spawn(move || {
        let mut s = UnixStream::connect(&socket).unwrap();
        let _ = s.write_all(&post(endpoint, &body));
        let _ = s.read_to_end(&mut Vec::new());
    })
}

#[test]
fn a_plugin_killed_while_controller_publish_is_under_way_detaches_the_volume_at_its_next_start() {
    let mut p = Plugin::start_with(&["-enable-attach"], &[], &["hang:ControllerPublishVolume"]);
    p.create("cut", json!({"size": "1Mi"}));
    let h = p.handle("cut");
    let call = in_background(&p, "/VolumeDriver.Mount", "cut");
    // The driver attached it; the answer never reaches the plugin, which is killed.
    wait_for(
        "the driver's ControllerPublishVolume",
        Duration::from_secs(20),
        || p.calls("ControllerPublishVolume") == 1,
    );
    p.kill();
    call.join().unwrap();
    assert!(p.attached(&h), "the kill left the volume attached");
    assert_eq!(p.calls("NodeStageVolume"), 0);

    p.stop_proxy();
    p.spawn();
    assert_eq!(
        p.methods_on(&h),
        ["ControllerPublishVolume", "ControllerUnpublishVolume"]
    );
    assert!(!p.attached(&h), "the restarted plugin detached it");
    assert!(
        p.log().contains("volume cut was left attached"),
        "{}",
        p.log()
    );
    // And the volume works as before.
    p.mount("cut", "c");
    p.unmount("cut", "c");
    assert!(!p.attached(&h));
    p.assert_no_mounts();
    p.ok("/VolumeDriver.Remove", json!({"Name": "cut"}));
}

#[test]
fn a_plugin_killed_between_the_last_unstage_and_controller_unpublish_detaches_the_volume_at_its_next_start(
) {
    let mut p = Plugin::start_with(
        &["-enable-attach"],
        &[],
        &["delay:ControllerUnpublishVolume:600s"],
    );
    p.create("late", json!({"size": "1Mi"}));
    let h = p.handle("late");
    p.mount("late", "c");
    let call = in_background(&p, "/VolumeDriver.Unmount", "late");
    wait_for(
        "the driver's NodeUnstageVolume",
        Duration::from_secs(20),
        || p.calls("NodeUnstageVolume") == 1,
    );
    // ControllerUnpublishVolume is held in the proxy: the plugin is killed waiting for it.
    std::thread::sleep(Duration::from_millis(300));
    p.kill();
    call.join().unwrap();
    assert!(p.attached(&h), "the kill left the volume attached");
    p.assert_no_mounts();

    p.stop_proxy();
    p.spawn();
    assert_eq!(
        p.methods_on(&h).last().unwrap(),
        "ControllerUnpublishVolume"
    );
    assert!(!p.attached(&h), "the restarted plugin detached it");
    p.ok("/VolumeDriver.Remove", json!({"Name": "late"}));
    assert_eq!(p.calls("ControllerUnpublishVolume"), 1);
}

/// The one request of `method` on volume `handle`.
fn request_on(p: &Plugin, method: &str, handle: &str) -> Value {
    let found: Vec<Value> = p
        .driver
        .requests(method)
        .into_iter()
        .filter(|r| r["volume_id"] == handle || r["name"] == handle)
        .collect();
    assert_eq!(found.len(), 1, "{method} on {handle}: {found:?}");
    found[0].clone()
}

#[test]
fn create_options_reach_the_driver_as_parameters_attributes_access_mode_and_the_nodes_topology() {
    let p = Plugin::start();
    p.create(
        "prov",
        json!({"size": "2Mi", "parameter.tier": "gold", "attribute.team": "a",
               "accessMode": "ReadWriteMany", "mountOptions": "noatime"}),
    );
    let create = request_on(&p, "CreateVolume", "kcsi-prov");
    assert_eq!(create["parameters"], json!({"tier": "gold"}));
    let cap = &create["volume_capabilities"][0];
    // csi.proto: MULTI_NODE_MULTI_WRITER = 5.
    assert_eq!(cap["access_mode"]["mode"], 5, "{cap}");
    assert_eq!(
        cap["AccessType"]["Mount"]["mount_flags"],
        json!(["noatime"])
    );
    // The accessibility requirement is the topology NodeGetInfo answered.
    let info = &p
        .sequence()
        .into_iter()
        .find(|(m, _, _)| m == "NodeGetInfo")
        .unwrap()
        .2;
    let segments = &info["accessible_topology"]["segments"];
    assert!(
        segments.as_object().is_some_and(|s| !s.is_empty()),
        "{info}"
    );
    let req = &create["accessibility_requirements"];
    assert_eq!(
        req["requisite"],
        json!([{"segments": segments}]),
        "{create}"
    );
    assert_eq!(
        req["preferred"],
        json!([{"segments": segments}]),
        "{create}"
    );

    let h = p.handle("prov");
    let path = p.mount("prov", "c");
    let publish = request_on(&p, "NodePublishVolume", &h);
    assert_eq!(publish["volume_context"]["team"], "a", "{publish}");
    assert_eq!(publish["volume_capability"]["access_mode"]["mode"], 5);
    assert_eq!(
        mount_capability(&publish)["mount_flags"],
        json!(["noatime"])
    );
    std::fs::write(path.join("f"), b"rw").unwrap();
    p.unmount("prov", "c");

    // ReadOnlyMany: published read-only, a write is refused by the kernel.
    p.create(
        "ro",
        json!({"volumeHandle": h.clone(), "accessMode": "ReadOnlyMany"}),
    );
    let path = p.mount("ro", "c");
    assert_eq!(std::fs::read(path.join("f")).unwrap(), b"rw");
    let e = std::fs::write(path.join("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let publish = p.driver.last_request("NodePublishVolume");
    assert_eq!(publish["readonly"], true);
    // csi.proto: MULTI_NODE_READER_ONLY = 3.
    assert_eq!(publish["volume_capability"]["access_mode"]["mode"], 3);
    p.unmount("ro", "c");
    p.ok("/VolumeDriver.Remove", json!({"Name": "ro"}));

    // ReadWriteOncePod: one caller at a time.
    p.create(
        "once",
        json!({"size": "1Mi", "accessMode": "ReadWriteOncePod"}),
    );
    p.mount("once", "first");
    let e = p.err(
        "/VolumeDriver.Mount",
        json!({"Name": "once", "ID": "second"}),
    );
    assert!(
        e.contains("ReadWriteOncePod and in use by caller first")
            && e.contains("FailedPrecondition"),
        "{e}"
    );
    assert_eq!(
        p.calls("NodePublishVolume"),
        3,
        "the second caller got a publish"
    );
    p.unmount("once", "first");
    p.mount("once", "second");
    p.unmount("once", "second");
    p.assert_no_mounts();
    p.ok("/VolumeDriver.Remove", json!({"Name": "once"}));
    p.ok("/VolumeDriver.Remove", json!({"Name": "prov"}));
}

#[test]
fn secrets_come_from_the_operators_directory_and_are_never_logged_or_kept() {
    let secrets = short_tempdir("kcsi-sec");
    let values = [
        ("CreateVolumeSecret", "create-s3cret"),
        ("DeleteVolumeSecret", "delete-s3cret"),
        ("ControllerPublishVolumeSecret", "attach-s3cret"),
        ("ControllerUnpublishVolumeSecret", "detach-s3cret"),
        ("NodeStageVolumeSecret", "stage-s3cret"),
        ("NodePublishVolumeSecret", "publish-s3cret"),
    ];
    let file: serde_json::Map<String, Value> = values
        .iter()
        .map(|(k, v)| (k.to_string(), json!({"key": v})))
        .collect();
    std::fs::write(
        secrets.path().join("team.json"),
        Value::from(file).to_string(),
    )
    .unwrap();
    std::fs::write(
        secrets.path().join("typo.json"),
        r#"{"NodeStageSecret": {}}"#,
    )
    .unwrap();
    let dir = secrets.path().display().to_string();
    let p = Plugin::start_with(&["-enable-attach"], &["--secrets-dir", &dir], &[]);

    // A secrets file that is missing or not valid: refused, nothing created.
    for (name, needle) in [
        ("missing", "cannot read secrets file"),
        ("typo", "is not valid"),
    ] {
        let e = p.err(
            "/VolumeDriver.Create",
            json!({"Name": "bad", "Opts": {"secrets": name}}),
        );
        assert!(e.contains(needle) && e.contains("volume bad"), "{e}");
    }
    assert_eq!(p.calls("CreateVolume"), 0);

    p.create("sec", json!({"size": "1Mi", "secrets": "team"}));
    let h = p.handle("sec");
    p.mount("sec", "c");
    // Nothing kcsi wrote while the volume is attached and published holds a secret.
    let mut written = String::new();
    for f in p.files_on_disk() {
        written += &std::fs::read_to_string(&f).unwrap_or_default();
    }
    p.unmount("sec", "c");
    p.ok("/VolumeDriver.Remove", json!({"Name": "sec"}));
    for (method, value) in [
        ("CreateVolume", "create-s3cret"),
        ("DeleteVolume", "delete-s3cret"),
        ("ControllerPublishVolume", "attach-s3cret"),
        ("ControllerUnpublishVolume", "detach-s3cret"),
        ("NodeStageVolume", "stage-s3cret"),
        ("NodePublishVolume", "publish-s3cret"),
    ] {
        let req = request_on(
            &p,
            method,
            if method == "CreateVolume" {
                "kcsi-sec"
            } else {
                &h
            },
        );
        assert_eq!(req["secrets"], json!({"key": value}), "{method}: {req}");
    }
    // Nor does what is left, or the plugin's log.
    for f in p.files_on_disk() {
        written += &std::fs::read_to_string(&f).unwrap_or_default();
    }
    written += &p.log();
    for (_, value) in values {
        assert!(!written.contains(value), "{value} was kept or logged");
    }
    p.assert_no_mounts();
}
