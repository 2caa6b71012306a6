//! `kcsi volume-plugin` through its HTTP API (the Docker volume plugin protocol, as Docker and
//! Podman call it) against the real csi-driver-host-path: one stage and one publish per
//! caller, Mount calls counted per caller, serialised calls, restart after SIGKILL with the
//! counts kept, and bad input answered with a clear `Err` without touching the state on disk.
//! Every test checks no mount is left.

use kcsi_testkit as common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{mounts_below, short_tempdir, unmount_below, wait_for, DriverProcess};
use serde_json::{json, Value};

/// A running plugin on its own root and socket, in front of a real hostpath driver.
struct Plugin {
    dir: tempfile::TempDir,
    driver: DriverProcess,
    child: Option<Child>,
}

impl Plugin {
    fn start() -> Plugin {
        let mut p = Plugin {
            dir: short_tempdir("kcsi-vp"),
            driver: DriverProcess::hostpath("kcsi-node", &[]),
            child: None,
        };
        p.spawn();
        p
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
        let child = Command::new(env!("CARGO_BIN_EXE_kcsi"))
            .arg("volume-plugin")
            .arg("--endpoint")
            .arg(format!("unix://{}", self.driver.endpoint()))
            .args(["--name", "kcsi"])
            .arg("--root")
            .arg(self.root())
            .arg("--listen")
            .arg(self.socket())
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
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.kill();
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
    p.create("data", json!({"size": "10Mi", "tier": "gold"}));
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
        r#"{{"Name": "big", "Opts": {{"k": "{}"}}}}"#,
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
