//! kcsi-testkit, the one test harness of kcsi's Rust suites, the `kcsi` command's suites and
//! the benches (a dev-only crate; it uses kcsi's public facade only): real peer processes
//! ([`driver`]), the C API as owned handles ([`capi`]), and a real kube-apiserver with its
//! admin helpers ([`apiserver`]). Everything here cleans up after itself, also after a failure.
// The C API's out strings are taken by safe fns, as kcsi's own C shell takes its pointers:
// pointer validity is the C contract the tests exercise.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod apiserver;
pub mod capi;
pub mod driver;
pub mod chost;
pub mod mountinfo;
pub mod plugin_peers;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use driver::{block_capability, mount_capability, DriverProcess};
pub use mountinfo::{is_mount_point, mounts_below};

/// The driver name the hostpath driver (and the fault driver) serve in these tests.
pub const DRIVER: &str = "hostpath.csi.k8s.io";

/// The repository root (these helpers are shared by the workspace's crates).
pub fn repo() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|d| d.join("scripts/peers/path.sh").exists())
        .unwrap_or(&manifest)
        .to_path_buf()
}

/// Path of a built peer binary (scripts/peers/path.sh); panics with the build command when
/// it is missing.
pub fn peer_binary(name: &str) -> PathBuf {
    let out = Command::new("bash")
        .arg(repo().join("scripts/peers/path.sh"))
        .arg(name)
        .output()
        .expect("run scripts/peers/path.sh");
    assert!(
        out.status.success(),
        "peer {name} is not built: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A short temp dir (Unix socket paths are limited to 107 bytes).
pub fn short_tempdir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("tempdir")
}

/// Polls `ready` every 20 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A standalone kcsi host config rooted at `root`.
pub fn host_config(root: &Path, node: &str) -> String {
    serde_json::json!({"nodeName": node, "rootDir": root}).to_string()
}

/// Unmounts everything mounted at or below `dir`, deepest first, so no test leaves a mount.
pub fn unmount_below(dir: &Path) {
    for t in mounts_below(dir) {
        let _ = Command::new("umount").arg("-l").arg(&t).status();
    }
}

/// Loop devices backed by `file` (`losetup -j`).
pub fn loop_devices(file: &Path) -> Vec<String> {
    let out = Command::new("losetup")
        .arg("-j")
        .arg(file)
        .output()
        .expect("losetup -j");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').next().map(str::to_string))
        .filter(|s| !s.is_empty())
        .collect()
}

/// Detaches every loop device backed by a file directly in `dir`.
pub fn detach_loops_below(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            for dev in loop_devices(&e.path()) {
                let _ = Command::new("losetup").arg("-d").arg(dev).status();
            }
        }
    }
}

/// Waits until no loop device is backed by `file`: `losetup -d` of a device something still
/// has open (udev probing it, say) only marks it for auto-clear, so detaching may finish late.
pub fn wait_loop_detached(file: &Path) {
    wait_for("loop device detach", Duration::from_secs(10), || {
        loop_devices(file).is_empty()
    });
}

/// The names of the drivers registered with `host` (kcsi_list_drivers' order).
pub fn driver_names(host: &kcsi::Host) -> Vec<String> {
    host.drivers_status().into_iter().map(|d| d.name).collect()
}

/// `into` gains `from`'s top-level keys (both JSON objects).
pub fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}
