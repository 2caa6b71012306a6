//! kcsi never strands a volume and never leaves its root, against the real hostpath driver with
//! real mounts (run as root): stale temp files from killed writes, a host SIGKILLed at random
//! points, 16 threads racing on one volume, symlinks planted below the root or swapped in
//! between SetUp and TearDown, the `vol_data.json` mode, and device mounts listed and unstaged
//! by handle (filesystem ones also after their `vol_data.json` is gone, block ones after a
//! restart).

use kcsi_testkit as common;

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::chost::{CErr, CHost};
use common::{is_mount_point, mounts_below, short_tempdir, unmount_below, DriverProcess, DRIVER};
use kcsi::ffi::*;
use kcsi::{Layout, ESCAPED_PLUGIN_NAME};
use serde_json::{json, Value};

const UID: &str = "pod-1";
const STALE_OLD: &str = ".vol_data.json.999999999.tmp";
const STALE_NEW: &str = ".vol_data.json.999999999.00000000deadbeef.tmp";

fn pod(uid: &str) -> Value {
    json!({"metadata": {"name": "p", "namespace": "ns", "uid": uid}, "spec": {"containers": []}})
}

fn pv_spec(name: &str, handle: &str, block: bool) -> Value {
    let mode = if block { "Block" } else { "Filesystem" };
    json!({"persistentVolume": {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": mode,
                 "csi": {"driver": DRIVER, "volumeHandle": handle}}
    }, "readOnly": false})
}

fn inline_spec(name: &str) -> Value {
    json!({"volume": {"name": name, "csi": {"driver": DRIVER}}})
}

fn config(root: &Path) -> Value {
    json!({"nodeName": "node-1", "rootDir": root, "csiDrivers": [{
        "metadata": {"name": DRIVER},
        "spec": {"attachRequired": false, "podInfoOnMount": true,
                 "volumeLifecycleModes": ["Persistent", "Ephemeral"]}
    }]})
}

/// A root, the real hostpath driver and a kcsi host registered with it. Unmounts everything
/// below the root when dropped.
struct Env {
    host: CHost,
    driver: DriverProcess,
    root: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let root = short_tempdir("kcsi-root");
        let driver = DriverProcess::hostpath("node-1", &[]);
        let host = CHost::new(&config(root.path()));
        host.register(DRIVER, &driver.endpoint());
        Env { host, driver, root }
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    fn layout(&self) -> Layout {
        Layout::new(self.root())
    }

    fn pod_dir(&self, spec: &str) -> PathBuf {
        self.layout().pod_volume_dir(UID, spec).unwrap()
    }

    fn dmp(&self, handle: &str) -> PathBuf {
        self.layout().device_mount_path(DRIVER, handle).unwrap()
    }

    /// A fresh host on the same root, as after a kubelet restart.
    fn restart_host(&mut self) {
        self.host = CHost::new(&config(self.root.path()));
        self.host.register(DRIVER, &self.driver.endpoint());
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        unmount_below(self.root.path());
    }
}

/// Every file and symlink below `dir` (directories are not listed), relative, sorted, but for
/// kcsi's blanks: temp files a live host keeps ready in its temp dir
/// (`.vol_data.json.<pid>.<random>.blank`), not anything an operation left.
fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(p);
            } else if !p.to_string_lossy().ends_with(".blank") {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<_> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    n.sort();
    n
}

fn plant_stale_temp_files(dir: &Path) {
    for name in [STALE_OLD, STALE_NEW] {
        std::fs::write(dir.join(name), "{\"driverName\":").unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Killed writes and interrupted teardowns

#[test]
fn stale_temp_files_do_not_block_mounter_teardown_or_device_unmount() {
    let env = Env::new();
    let handle = env.driver.create_volume("pv-tmp", false, 1 << 20);
    let (spec, dmp) = (pv_spec("pv-tmp", &handle, false), env.dmp(&handle));
    env.host.mount_device(&spec, &dmp).unwrap();
    env.host.set_up(&spec, &pod(UID)).unwrap();
    let (pod_dir, sha_dir) = (env.pod_dir("pv-tmp"), dmp.parent().unwrap().to_path_buf());
    plant_stale_temp_files(&pod_dir);
    plant_stale_temp_files(&sha_dir);

    env.host.tear_down("pv-tmp", UID).unwrap();
    assert!(!pod_dir.exists(), "left {:?}", names(&pod_dir));
    env.host.unmount_device(&dmp).unwrap();
    assert!(!sha_dir.exists(), "left {:?}", names(&sha_dir));
    assert_eq!(env.driver.volume_paths(&handle), (vec![], vec![]));

    // A re-setup removes a killed writer's temp file too.
    env.host.mount_device(&spec, &dmp).unwrap();
    plant_stale_temp_files(&sha_dir);
    env.host.mount_device(&spec, &dmp).unwrap();
    assert_eq!(names(&sha_dir), vec!["globalmount", "vol_data.json"]);
    env.host.unmount_device(&dmp).unwrap();
    assert!(!sha_dir.exists());
}

#[test]
fn interrupted_teardown_and_unmount_device_can_be_retried_to_the_end() {
    let env = Env::new();
    // What a kill after removing vol_data.json leaves: the dir and a killed writer's temp file.
    let pod_dir = env.pod_dir("pv-int");
    std::fs::create_dir_all(&pod_dir).unwrap();
    plant_stale_temp_files(&pod_dir);
    env.host.tear_down("pv-int", UID).unwrap();
    assert!(!pod_dir.exists());
    // Nothing at all is still NOT_FOUND, as upstream.
    assert_eq!(
        env.host.tear_down("pv-int", UID).unwrap_err().result,
        KCSI_ERR_NOT_FOUND
    );

    let sha_dir = env.dmp("h-int").parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&sha_dir).unwrap();
    plant_stale_temp_files(&sha_dir);
    env.host.unmount_device(&env.dmp("h-int")).unwrap();
    assert!(!sha_dir.exists());
    assert_eq!(env.driver.calls("NodeUnstageVolume").len(), 0);
}

#[test]
fn stale_temp_files_do_not_block_block_teardown() {
    let env = Env::new();
    let handle = env.driver.create_volume("blk-tmp", true, 1 << 20);
    let spec = pv_spec("blk-tmp", &handle, true);
    let publish = env.host.map_block(&spec, &pod(UID)).unwrap();
    assert!(
        is_mount_point(&publish),
        "the driver bind-mounts its loop device"
    );
    let paths = env.layout().block_paths("blk-tmp", UID).unwrap();
    plant_stale_temp_files(&paths.data_dir);
    let listed = env.host.list_device_mounts().unwrap();
    assert_eq!(
        (
            &listed[0]["kind"],
            &listed[0]["specName"],
            &listed[0]["volumeHandle"],
            &listed[0]["driver"]
        ),
        (
            &json!("block"),
            &json!("blk-tmp"),
            &json!(handle),
            &json!(DRIVER)
        ),
        "{listed}"
    );

    env.host.unmap_block("blk-tmp", UID).unwrap();
    assert!(
        !paths.volume_dir.exists(),
        "left {:?}",
        files_below(&paths.volume_dir)
    );
    assert!(!paths.staging_path.exists());
    assert_eq!(env.driver.volume_paths(&handle), (vec![], vec![]));

    // Interrupted after vol_data.json went: a data dir of temp files only.
    std::fs::create_dir_all(&paths.data_dir).unwrap();
    plant_stale_temp_files(&paths.data_dir);
    env.host.unmap_block("blk-tmp", UID).unwrap();
    assert!(!paths.volume_dir.exists());
    env.driver.delete_volume(&handle);
    assert!(mounts_below(env.root()).is_empty());
}

#[test]
fn block_volumes_are_listed_and_torn_down_by_handle_after_a_restart() {
    let mut env = Env::new();
    let handle = env.driver.create_volume("blk-handle", true, 1 << 20);
    env.host
        .map_block(&pv_spec("blk-handle", &handle, true), &pod(UID))
        .unwrap();
    let paths = env.layout().block_paths("blk-handle", UID).unwrap();
    // The pod went (UnmapPodDevice), then the kubelet restarted and forgot the volume.
    env.host.unmap_pod_block("blk-handle", UID).unwrap();
    env.restart_host();

    let listed = env.host.list_device_mounts().unwrap();
    let m = &listed[0];
    let got = json!([
        m["kind"],
        m["specName"],
        m["volumeHandle"],
        m["deviceMountPath"]
    ]);
    let want = json!(["block", "blk-handle", handle, paths.staging_path]);
    assert_eq!(got, want, "{listed}");
    env.host.unmount_device_by_handle(DRIVER, &handle).unwrap();
    let unstaged = env.driver.calls("NodeUnstageVolume");
    assert_eq!(
        unstaged.last().unwrap()["Request"]["staging_target_path"],
        paths.staging_path.display().to_string()
    );
    assert!(!paths.volume_dir.exists() && !paths.staging_path.exists());
    assert_eq!(env.host.list_device_mounts().unwrap(), json!([]));
    env.driver.delete_volume(&handle);
    assert!(mounts_below(env.root()).is_empty());
}

/// The kill loop's calls, in the child's order. The child appends the upper-case byte to its
/// phase file before the call and the lower-case one once the call succeeded (a failed call
/// panics the child): a kill lands in the phase of the last upper-case byte, and a lower-case
/// one after it says that call had returned.
const PHASES: [(u8, &str); 4] = [
    (b'S', "staging"),
    (b'P', "publishing"),
    (b'U', "tearing down"),
    (b'D', "unstaging"),
];

/// Kill-loop child: sets up and tears down one volume forever against the driver the parent
/// started, until the parent SIGKILLs it; any call that fails ends it with a panic. Does nothing
/// unless run by the parent.
#[test]
#[ignore = "run by killed_hosts_leave_nothing_a_fresh_host_cannot_tear_down"]
fn kill_loop_child() {
    let Ok(root) = std::env::var("KCSI_KILL_ROOT") else {
        return;
    };
    let endpoint = std::env::var("KCSI_KILL_ENDPOINT").unwrap();
    let handle = std::env::var("KCSI_KILL_HANDLE").unwrap();
    let host = CHost::new(&config(Path::new(&root)));
    host.register(DRIVER, &endpoint);
    let spec = pv_spec("pv-kill", &handle, false);
    let dmp = Layout::new(&root)
        .device_mount_path(DRIVER, &handle)
        .unwrap();
    let mut phases = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(std::env::var("KCSI_KILL_PHASES").unwrap())
        .unwrap();
    let mut run = |phase: u8, call: &dyn Fn() -> Result<(), CErr>| {
        std::io::Write::write_all(&mut phases, &[phase]).unwrap();
        call().unwrap_or_else(|e| panic!("{}: {e:?}", phase as char));
        std::io::Write::write_all(&mut phases, &[phase.to_ascii_lowercase()]).unwrap();
    };
    if std::env::var_os("KCSI_KILL_REPUBLISH").is_some() {
        // One staged volume republished in a loop: a vol_data.json save per NodePublish.
        run(b'S', &|| host.mount_device(&spec, &dmp));
        loop {
            run(b'P', &|| host.set_up(&spec, &pod(UID)));
        }
    }
    loop {
        run(b'S', &|| host.mount_device(&spec, &dmp));
        run(b'P', &|| host.set_up(&spec, &pod(UID)));
        run(b'U', &|| host.tear_down("pv-kill", UID));
        run(b'D', &|| host.unmount_device(&dmp));
    }
}

/// What a kill-loop child's phase file says.
#[derive(Debug, Default)]
struct ChildLog {
    /// The phase (index into [`PHASES`]) of the call the child last entered.
    phase: Option<usize>,
    /// Whether that call had returned (successfully) when the log ends.
    returned: bool,
    /// Successful SetUps.
    set_ups: usize,
}

fn child_log(file: &Path) -> ChildLog {
    let mut log = ChildLog::default();
    for b in std::fs::read(file).unwrap_or_default() {
        let phase = PHASES
            .iter()
            .position(|(p, _)| *p == b.to_ascii_uppercase())
            .unwrap_or_else(|| panic!("{}: byte {b:?}", file.display()));
        log.returned = b.is_ascii_lowercase();
        log.set_ups += usize::from(b == b'p');
        log.phase = Some(phase);
    }
    log
}

/// What a killed host left, in a few words: files kcsi wrote, mounts, the driver's view.
fn describe_leftovers(env: &Env, handle: &str, pod_dir: &Path, sha_dir: &Path) -> String {
    let mut parts = Vec::new();
    for (what, dir) in [("pod", pod_dir), ("device", sha_dir)] {
        if dir.exists() {
            let mut n: Vec<String> = names(dir)
                .into_iter()
                .map(|n| {
                    if n.ends_with(".tmp") {
                        "temp".to_string()
                    } else {
                        n
                    }
                })
                .collect();
            n.dedup();
            parts.push(format!("{what} dir [{}]", n.join(",")));
        }
    }
    let (staged, published) = env.driver.volume_paths(handle);
    if !staged.is_empty() {
        parts.push("staged".into());
    }
    if !published.is_empty() {
        parts.push("published".into());
    }
    if !mounts_below(env.root()).is_empty() {
        parts.push("mounted".into());
    }
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(" + ")
    }
}

/// `kill_loop_child` as a separate process on `env`'s root, driver and volume, logging its
/// calls to `log` and its panic to `stderr`.
fn spawn_kill_loop_child(
    env: &Env,
    handle: &str,
    log: &Path,
    stderr: &Path,
    republish: bool,
) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "kill_loop_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KCSI_KILL_ROOT", env.root())
        .env("KCSI_KILL_ENDPOINT", env.driver.endpoint())
        .env("KCSI_KILL_HANDLE", handle)
        .env("KCSI_KILL_PHASES", log)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap());
    if republish {
        command.env("KCSI_KILL_REPUBLISH", "1");
    }
    command.spawn().unwrap()
}

/// Waits until the child's log shows `ready`, looking every 100 µs (a call takes milliseconds);
/// panics with the child's stderr if it exited.
fn wait_for_child(
    child: &mut std::process::Child,
    log: &Path,
    stderr: &Path,
    what: &str,
    ready: impl Fn(&ChildLog) -> bool,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready(&child_log(log)) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the kill-loop child exited ({status}) before {what}: {}",
                std::fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// SIGKILLs the child and asserts it was still running: no call it made had failed.
fn kill_child(child: &mut std::process::Child, stderr: &Path) {
    use std::os::unix::process::ExitStatusExt;
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the kill-loop child ended ({status}) before the kill: {}",
        std::fs::read_to_string(stderr).unwrap_or_default()
    );
}

/// Starts `kill_loop_child` republishing, waits until its first SetUp succeeded, lets it run
/// for a random while below `max_micros`, and SIGKILLs it; returns its successful SetUps.
fn run_and_kill_republisher(env: &Env, handle: &str, scratch: &Path, max_micros: u64) -> usize {
    let (log, stderr) = (scratch.join("republish"), scratch.join("republish.stderr"));
    let _ = std::fs::remove_file(&log);
    let mut child = spawn_kill_loop_child(env, handle, &log, &stderr, true);
    wait_for_child(&mut child, &log, &stderr, "the first SetUp", |l| {
        l.set_ups > 0
    });
    std::thread::sleep(Duration::from_micros(fastrand::u64(0..max_micros)));
    kill_child(&mut child, &stderr);
    child_log(&log).set_ups
}

#[test]
fn kills_mid_write_leave_temp_files_only_in_kcsis_temp_dir_which_a_new_host_sweeps() {
    // Kill a republishing host until enough kills have landed mid-write, each seen as the
    // temp file the killed writer left: never in the pod's volume dir or the global mount dir
    // (a dir the kubelet could then never clean), only in kcsi's temp dir.
    const WANTED: usize = 3;
    const MAX_KILLS: usize = 400;
    let mut env = Env::new();
    let handle = env.driver.create_volume("pv-kill", false, 1 << 20);
    let (pod_dir, dmp) = (env.pod_dir("pv-kill"), env.dmp(&handle));
    let sha_dir = dmp.parent().unwrap().to_path_buf();
    let temp_dir = kcsi::temp_dir(env.root());
    let scratch = short_tempdir("kcsi-kill");
    // A write in flight: a new temp file, or a blank (made ahead, all zeros) being written.
    let temps = |dir: &Path| -> Vec<String> {
        names(dir)
            .into_iter()
            .filter(|n| {
                n.ends_with(".tmp")
                    || (n.ends_with(".blank")
                        && std::fs::read(dir.join(n)).is_ok_and(|b| b.iter().any(|&c| c != 0)))
            })
            .collect()
    };
    let (mut kills, mut mid_write, mut set_ups) = (0, 0, 0);
    while mid_write < WANTED && kills < MAX_KILLS {
        set_ups += run_and_kill_republisher(&env, &handle, scratch.path(), 20_000);
        kills += 1;
        for dir in [&pod_dir, &sha_dir] {
            assert_eq!(
                temps(dir),
                Vec::<String>::new(),
                "kill {kills}: {}",
                dir.display()
            );
        }
        if !temps(&temp_dir).is_empty() {
            mid_write += 1;
        }
        env.restart_host();
        assert_eq!(
            names(&temp_dir),
            Vec::<String>::new(),
            "kill {kills}: not swept"
        );
    }
    eprintln!("{kills} kills, {mid_write} of them mid-write; {set_ups} successful SetUps");
    assert!(mid_write >= 1, "none of {kills} kills landed mid-write");
    match env.host.tear_down("pv-kill", UID) {
        Ok(()) => {}
        Err(e) if e.result == KCSI_ERR_NOT_FOUND && !pod_dir.exists() => {}
        Err(e) => panic!("teardown failed: {e:?}"),
    }
    env.host.unmount_device(&dmp).unwrap();
    assert!(!pod_dir.exists() && !sha_dir.exists());
    assert!(mounts_below(env.root()).is_empty());
}

#[test]
fn killed_hosts_leave_nothing_a_fresh_host_cannot_tear_down() {
    const KILLS: usize = 32; // 8 aimed at each phase
    const MIN_PUBLISHED_KILLS: usize = 2;
    let mut env = Env::new();
    let handle = env.driver.create_volume("pv-kill", false, 1 << 20);
    let (pod_dir, dmp) = (env.pod_dir("pv-kill"), env.dmp(&handle));
    let sha_dir = dmp.parent().unwrap().to_path_buf();
    let scratch = short_tempdir("kcsi-kill");
    let target = pod_dir.join("mount");
    let mut left: BTreeMap<(usize, bool, String), usize> = BTreeMap::new();
    // Successful SetUps, and kills after which the driver still had the volume published.
    let (mut set_ups, mut while_published) = (0, 0);
    for i in 0..KILLS {
        let aim = i % PHASES.len();
        let log = scratch.path().join(format!("phases-{i}"));
        let stderr = scratch.path().join(format!("stderr-{i}"));
        let mut child = spawn_kill_loop_child(&env, &handle, &log, &stderr, false);
        // Kill as soon as the child enters the aimed-at phase, or a little into it.
        let what = format!("kill {i}: {}", PHASES[aim].1);
        wait_for_child(&mut child, &log, &stderr, &what, |l| l.phase == Some(aim));
        std::thread::sleep(Duration::from_micros(fastrand::u64(0..3_000)));
        kill_child(&mut child, &stderr);
        let ChildLog {
            phase,
            returned,
            set_ups: child_set_ups,
        } = child_log(&log);
        let phase = phase.unwrap();
        set_ups += child_set_ups;

        // What a kill in each phase may leave: the calls before it returned, the one in
        // flight may or may not have (the driver finishes it without kcsi).
        let (staged, published) = env.driver.volume_paths(&handle);
        let state = format!(
            "kill {i} {} {}: staged {staged:?}, published {published:?}, pod dir {:?}",
            if returned { "after" } else { "while" },
            PHASES[phase].1,
            names(&pod_dir)
        );
        let at = |p: &Path| vec![p.display().to_string()];
        let unpublished = published.is_empty() && !pod_dir.exists();
        match (PHASES[phase].0, returned) {
            (b'S', false) => assert!(unpublished, "{state}"),
            (b'S' | b'U', true) => assert!(staged == at(&dmp) && unpublished, "{state}"),
            (b'P', true) => assert!(
                staged == at(&dmp) && published == at(&target) && is_mount_point(&target),
                "{state}"
            ),
            (b'P' | b'U', false) => assert_eq!(staged, at(&dmp), "{state}"),
            (b'D', false) => assert!(unpublished, "{state}"),
            _ => assert!(
                staged.is_empty() && unpublished && !sha_dir.exists(),
                "{state}"
            ),
        }
        while_published += usize::from(published == at(&target));
        *left
            .entry((
                phase,
                returned,
                describe_leftovers(&env, &handle, &pod_dir, &sha_dir),
            ))
            .or_default() += 1;
        env.restart_host();
        match env.host.tear_down("pv-kill", UID) {
            Ok(()) => {}
            Err(e) if e.result == KCSI_ERR_NOT_FOUND && !pod_dir.exists() => {}
            Err(e) => panic!("kill {i}: teardown failed: {e:?}"),
        }
        env.host
            .unmount_device(&dmp)
            .unwrap_or_else(|e| panic!("kill {i}: {e:?}"));
        assert!(
            !pod_dir.exists(),
            "kill {i}: pod dir left: {:?}",
            names(&pod_dir)
        );
        assert!(
            !sha_dir.exists(),
            "kill {i}: device dir left: {:?}",
            names(&sha_dir)
        );
        assert!(mounts_below(env.root()).is_empty(), "kill {i}: mounts left");
        assert!(
            files_below(env.root()).is_empty(),
            "kill {i}: {:?}",
            files_below(env.root())
        );
        assert_eq!(
            env.driver.volume_paths(&handle),
            (vec![], vec![]),
            "kill {i}"
        );
    }
    eprintln!(
        "{KILLS} kills ({set_ups} successful SetUps, {while_published} kills with the volume published); what each left before a fresh host tore it down:"
    );
    for ((phase, returned, what), n) in &left {
        let when = if *returned { "after" } else { "while" };
        eprintln!("  {n:>3} x killed {when} {}: {what}", PHASES[*phase].1);
    }
    for (phase, (_, name)) in PHASES.iter().enumerate() {
        assert!(
            left.keys().any(|(p, _, _)| *p == phase),
            "no kill landed while {name}: {left:?}"
        );
    }
    // Every child aimed at tearing down or unstaging got there through a SetUp that succeeded.
    assert!(
        set_ups >= KILLS / 2,
        "{set_ups} successful SetUps in {KILLS} kills"
    );
    assert!(
        while_published >= MIN_PUBLISHED_KILLS,
        "{while_published} of {KILLS} kills landed with the volume published (want at least {MIN_PUBLISHED_KILLS})"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Concurrent operations on one volume

#[derive(Default, Debug)]
struct Tally {
    ops: usize,
    ok: usize,
    /// Successful SetUps: the race must not starve the work it races on.
    published: usize,
    /// Refusals the state explains (publish of an unstaged volume, unstage while published,
    /// teardown of nothing, a stale unmounter).
    refused: usize,
    failed: Vec<String>,
}

#[test]
fn sixteen_threads_racing_on_one_volume_stay_consistent_with_the_driver() {
    const THREADS: usize = 16;
    const ROUNDS: usize = 12;
    const MIN_PUBLISHED: usize = 4;
    let env = Env::new();
    let handle = env.driver.create_volume("pv-race", false, 1 << 20);
    let (spec, dmp) = (pv_spec("pv-race", &handle, false), env.dmp(&handle));
    let (pod_dir, sha_dir) = (env.pod_dir("pv-race"), dmp.parent().unwrap().to_path_buf());
    let target = pod_dir.join("mount");
    let tally = std::sync::Mutex::new(Tally::default());
    for round in 0..ROUNDS {
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (env, spec, dmp, tally) = (&env, &spec, &dmp, &tally);
                s.spawn(move || {
                    let op = (round * 7 + t * 3) % 4;
                    let result: Result<(), CErr> = match op {
                        0 => env.host.mount_device(spec, dmp),
                        1 => env.host.unmount_device(dmp),
                        2 => env.host.set_up(spec, &pod(UID)),
                        _ => env.host.tear_down("pv-race", UID),
                    };
                    let mut t = tally.lock().unwrap();
                    t.ops += 1;
                    match result {
                        Ok(()) => {
                            t.ok += 1;
                            t.published += usize::from(op == 2);
                        }
                        Err(e) if explained(op, &e) => t.refused += 1,
                        Err(e) => t.failed.push(format!("op {op}: {e:?}")),
                    }
                });
            }
        });
        // Between rounds kcsi's files, the mounts and the driver's state agree.
        let (staged, published) = env.driver.volume_paths(&handle);
        let dmp_s = dmp.display().to_string();
        assert_eq!(
            sha_dir.join("vol_data.json").exists(),
            staged == vec![dmp_s.clone()],
            "round {round}: staged {staged:?}, device dir {:?}",
            names(&sha_dir)
        );
        let is_published = published == vec![target.display().to_string()];
        assert_eq!(
            pod_dir.join("vol_data.json").exists(),
            is_published,
            "round {round}"
        );
        assert_eq!(is_mount_point(&target), is_published, "round {round}");
        assert!(!files_below(env.root()).iter().any(|f| f.ends_with(".tmp")));
    }
    let _ = env.host.tear_down("pv-race", UID);
    env.host.unmount_device(&dmp).unwrap();
    assert_eq!(env.driver.volume_paths(&handle), (vec![], vec![]));
    assert!(files_below(env.root()).is_empty() && mounts_below(env.root()).is_empty());
    let t = tally.into_inner().unwrap();
    eprintln!(
        "{} concurrent operations on one volume ({THREADS} threads x {ROUNDS} rounds): {} ok ({} SetUps), {} refused as the state explains, {} failed; driver saw {} NodeStage, {} NodeUnstage, {} NodePublish, {} NodeUnpublish",
        t.ops, t.ok, t.published, t.refused, t.failed.len(),
        env.driver.calls("NodeStageVolume").len(), env.driver.calls("NodeUnstageVolume").len(),
        env.driver.calls("NodePublishVolume").len(), env.driver.calls("NodeUnpublishVolume").len(),
    );
    assert!(t.failed.is_empty(), "{:#?}", t.failed);
    assert_eq!(t.ops, THREADS * ROUNDS);
    // A consistent run that refused everything would prove nothing: volumes really got
    // published, and each successful SetUp is backed by a real NodePublish or a mount kcsi found.
    assert!(
        t.published >= MIN_PUBLISHED,
        "only {} of {} SetUps succeeded (want at least {MIN_PUBLISHED})",
        t.published,
        THREADS * ROUNDS / 4
    );
    assert!(!env.driver.calls("NodePublishVolume").is_empty());
}

/// Whether a failed racing operation is what the volume's state at that moment explains.
fn explained(op: usize, e: &CErr) -> bool {
    match op {
        // hostpath: "volume ... must be staged before publishing".
        2 => e.grpc == 9 && e.message.contains("must be staged"),
        // hostpath: "volume ... is still published".
        1 => e.grpc == 13 && e.message.contains("still published"),
        3 => {
            e.result == KCSI_ERR_NOT_FOUND
                || (e.result == KCSI_ERR_FAILED_PRECONDITION && e.message.contains("set up again"))
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Nothing outside the root

/// A directory outside the root whose contents must never change.
struct Sentinel {
    dir: tempfile::TempDir,
    before: Vec<String>,
}

impl Sentinel {
    fn new() -> Sentinel {
        let dir = short_tempdir("kcsi-outside");
        // What a teardown that followed a symlink would find and delete.
        let fake = dir
            .path()
            .join(format!("volumes/{ESCAPED_PLUGIN_NAME}/vol/mount"));
        std::fs::create_dir_all(&fake).unwrap();
        std::fs::write(fake.join("precious"), "x").unwrap();
        std::fs::write(fake.parent().unwrap().join("vol_data.json"), "{}").unwrap();
        let before = Self::snapshot(dir.path());
        Sentinel { dir, before }
    }

    fn snapshot(dir: &Path) -> Vec<String> {
        let mut all = files_below(dir);
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    all.push(format!(
                        "{}/",
                        e.path().strip_prefix(dir).unwrap().display()
                    ));
                    stack.push(e.path());
                }
            }
        }
        all.sort();
        all
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn assert_untouched(&self, case: &str) {
        assert_eq!(
            Self::snapshot(self.path()),
            self.before,
            "{case}: outside the root changed"
        );
        assert!(
            mounts_below(self.path()).is_empty(),
            "{case}: mounted outside the root"
        );
    }
}

/// Removes `dir` and all below it, retried while kcsi's host makes blanks in its temp dir below
/// it in the background (a refused SetUp still took from the pool, which refills when saves
/// pause).
fn remove_dir_all_settled(dir: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while let Err(e) = std::fs::remove_dir_all(dir) {
        assert!(
            std::time::Instant::now() < deadline,
            "cannot remove {}: {e}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn assert_refused(case: &str, result: Result<impl std::fmt::Debug, CErr>, link: &Path) {
    let e = result.expect_err(case);
    assert_eq!(e.result, KCSI_ERR_FAILED_PRECONDITION, "{case}: {e:?}");
    assert!(
        e.message
            .contains(&format!("{} is a symlink", link.display())),
        "{case}: {}",
        e.message
    );
}

#[test]
fn symlinks_planted_below_the_root_are_refused_and_nothing_outside_is_touched() {
    let env = Env::new();
    let outside = Sentinel::new();
    let handle = env.driver.create_volume("pv-link", false, 1 << 20);
    let (spec, dmp) = (pv_spec("pv-link", &handle, false), env.dmp(&handle));
    let vol_dir = env.pod_dir("eph");
    let l = env.layout();
    let plugin_dir = l.plugin_dir();
    let cases: Vec<(&str, PathBuf)> = vec![
        ("pods/", l.pods_dir()),
        ("pods/<uid>", l.pods_dir().join(UID)),
        ("pods/<uid>/volumes", l.pods_dir().join(UID).join("volumes")),
        ("volume dir", vol_dir.clone()),
        ("mount", vol_dir.join("mount")),
        ("plugins/", env.root().join("plugins")),
        ("driver dir", plugin_dir.join(DRIVER)),
        ("global dir", dmp.parent().unwrap().to_path_buf()),
        ("globalmount", dmp.clone()),
        ("volumeDevices/", plugin_dir.join("volumeDevices")),
    ];
    let (stages, publishes) = (
        env.driver.calls("NodeStageVolume").len(),
        env.driver.calls("NodePublishVolume").len(),
    );
    for (case, link) in &cases {
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        // A refused SetUp still made kcsi's temp dir (plugins/kubernetes.io/csi/.kcsi-tmp: its
        // vol_data.json is staged there beside the volume's dirs): replaced by the link.
        if link.is_dir() && !link.is_symlink() {
            remove_dir_all_settled(link);
        }
        symlink(outside.path(), link).unwrap();
        if case.starts_with("volumeDevices") {
            assert_refused(
                case,
                env.host.map_block(&pv_spec("blk", "h", true), &pod(UID)),
                link,
            );
        } else if ["plugins/", "driver dir", "global dir", "globalmount"].contains(case) {
            assert_refused(case, env.host.mount_device(&spec, &dmp), link);
        } else {
            assert_refused(case, env.host.set_up(&inline_spec("eph"), &pod(UID)), link);
        }
        outside.assert_untouched(case);
        std::fs::remove_file(link).unwrap();
    }
    assert_eq!(
        env.driver.calls("NodeStageVolume").len(),
        stages,
        "nothing was staged"
    );
    assert_eq!(
        env.driver.calls("NodePublishVolume").len(),
        publishes,
        "nothing was published"
    );
    assert!(env
        .driver
        .volumes()
        .iter()
        .all(|v| v["Published"].as_array().is_none_or(|a| a.is_empty())));
}

#[test]
fn symlinks_swapped_in_between_set_up_and_tear_down_are_refused() {
    let env = Env::new();
    let outside = Sentinel::new();
    // The pod's dir swapped for a link to a look-alike outside the root.
    env.host.set_up(&inline_spec("vol"), &pod(UID)).unwrap();
    let pod_root = env.layout().pods_dir().join(UID);
    let moved = env.layout().pods_dir().join("moved");
    std::fs::rename(&pod_root, &moved).unwrap();
    symlink(outside.path(), &pod_root).unwrap();
    assert_refused("swapped pod dir", env.host.tear_down("vol", UID), &pod_root);
    outside.assert_untouched("swapped pod dir");
    std::fs::remove_file(&pod_root).unwrap();
    std::fs::rename(&moved, &pod_root).unwrap();
    env.host.tear_down("vol", UID).unwrap();

    // The global dir swapped between MountDevice and UnmountDevice.
    let handle = env.driver.create_volume("pv-swap", false, 1 << 20);
    let dmp = env.dmp(&handle);
    env.host
        .mount_device(&pv_spec("pv-swap", &handle, false), &dmp)
        .unwrap();
    let sha_dir = dmp.parent().unwrap().to_path_buf();
    let moved = sha_dir.with_extension("moved");
    std::fs::rename(&sha_dir, &moved).unwrap();
    symlink(outside.path(), &sha_dir).unwrap();
    assert_refused(
        "swapped global dir",
        env.host.unmount_device(&dmp),
        &sha_dir,
    );
    assert_refused(
        "swapped global dir, by handle",
        env.host.unmount_device_by_handle(DRIVER, &handle),
        &sha_dir,
    );
    outside.assert_untouched("swapped global dir");
    std::fs::remove_file(&sha_dir).unwrap();
    std::fs::rename(&moved, &sha_dir).unwrap();
    env.host.unmount_device(&dmp).unwrap();
    assert_eq!(env.driver.volume_paths(&handle), (vec![], vec![]));
    assert!(files_below(env.root()).is_empty() && mounts_below(env.root()).is_empty());
}

// ---------------------------------------------------------------------------------------------
// 6. Upstream's file mode

#[test]
fn volume_data_file_is_0666_less_the_umask() {
    let env = Env::new();
    env.host.set_up(&inline_spec("vol"), &pod(UID)).unwrap();
    // SAFETY: reads the umask by setting it and putting it back.
    let umask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    } as u32;
    let file = env.pod_dir("vol").join("vol_data.json");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666 & !umask, "{mode:o} under umask {umask:o}");
    env.host.tear_down("vol", UID).unwrap();
}

// ---------------------------------------------------------------------------------------------
// 7. Device mounts after a restart (kubernetes#85476)

#[test]
fn device_mounts_are_listed_and_unstaged_by_handle_without_volume_data() {
    let mut env = Env::new();
    let handle = env.driver.create_volume("pv-list", false, 1 << 20);
    let (spec, dmp) = (pv_spec("pv-list", &handle, false), env.dmp(&handle));
    env.host.mount_device(&spec, &dmp).unwrap();
    env.restart_host();
    let listed = env.host.list_device_mounts().unwrap();
    assert_eq!(
        listed,
        json!([{
            "kind": "filesystem", "driver": DRIVER, "volumeHandle": handle, "specName": null,
            "deviceMountPath": dmp, "mounted": false,
            "volumeDataFile": dmp.parent().unwrap().join("vol_data.json"),
            "volumeData": {"driverName": DRIVER, "volumeHandle": handle},
            "volumeDataError": null
        }])
    );

    // The file is lost: the entry stays, with the driver from its path.
    std::fs::remove_file(dmp.parent().unwrap().join("vol_data.json")).unwrap();
    let listed = env.host.list_device_mounts().unwrap();
    assert_eq!(
        (&listed[0]["driver"], &listed[0]["volumeData"]),
        (&json!(DRIVER), &Value::Null)
    );
    assert!(
        listed[0]["volumeDataError"]
            .as_str()
            .unwrap()
            .contains("No such file"),
        "{listed}"
    );
    // Plain UnmountDevice cannot unstage it (upstream skips), and keeps the dir for the list.
    env.host.unmount_device(&dmp).unwrap();
    assert_eq!(
        env.driver.volume_paths(&handle).0,
        vec![dmp.display().to_string()]
    );
    assert_eq!(
        env.host
            .list_device_mounts()
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A file naming another volume is refused; by driver and handle it is unstaged.
    std::fs::write(
        dmp.parent().unwrap().join("vol_data.json"),
        json!({"driverName": DRIVER, "volumeHandle": "other"}).to_string(),
    )
    .unwrap();
    let e = env
        .host
        .unmount_device_by_handle(DRIVER, &handle)
        .unwrap_err();
    assert_eq!(e.result, KCSI_ERR_FAILED_PRECONDITION, "{e:?}");
    std::fs::remove_file(dmp.parent().unwrap().join("vol_data.json")).unwrap();
    env.host.unmount_device_by_handle(DRIVER, &handle).unwrap();
    assert_eq!(env.driver.volume_paths(&handle), (vec![], vec![]));
    assert_eq!(env.host.list_device_mounts().unwrap(), json!([]));
    assert!(files_below(env.root()).is_empty());

    // Bad input is a clear error, never a crash.
    let e = env
        .host
        .unmount_device_by_handle("../x", &handle)
        .unwrap_err();
    assert_eq!(e.result, KCSI_ERR_INVALID_ARGUMENT);
    let e = env
        .host
        .unmount_device_by_handle("not.registered", &handle)
        .unwrap_err();
    assert_eq!(
        (e.result, e.class),
        (KCSI_ERR_NOT_FOUND, KCSI_CLASS_TRANSIENT),
        "{e:?}"
    );
    let e = common::chost::call(|err| {
        kcsi::ffi::device_mounts::kcsi_list_device_mounts(env.host.host, std::ptr::null_mut(), err)
    })
    .unwrap_err();
    assert_eq!(e.result, KCSI_ERR_INVALID_ARGUMENT);
}
