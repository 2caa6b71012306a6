//! `kcsi conformance` against the real csi-driver-host-path: every applicable case passes on
//! the plain driver, with `-enable-attach` and with `-attach-limit`; each case fails, by name,
//! under a fault that breaks what it checks (through the suite's fault proxy), and hostpath
//! fails the mount-options case when required to honour an option it drops; the suite runs the
//! driver itself (`--driver-command`) so the kill cases can restart it, and skips them without
//! it; a socket that is no CSI driver and a driver that hangs each get one line; the JUnit file
//! parses (with Python's XML parser) and says the same.

use kcsi_testkit as common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{mount_capability, mounts_below, short_tempdir, unmount_below, DriverProcess};
use serde_json::Value;

fn kcsi() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kcsi"))
}

fn run(args: &[&str]) -> Output {
    kcsi()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kcsi")
}

/// `kcsi --json conformance` with the suite running `driver` itself (`--driver-command`, so
/// the kill cases apply): the process the test started is stopped first.
fn conformance(driver: &mut DriverProcess, extra: &[&str]) -> (Option<i32>, Value) {
    let command = driver.shell_command();
    driver.kill();
    let mut args = vec!["--driver-command", &command];
    args.extend(extra);
    conformance_at(driver, &args)
}

/// `kcsi --json conformance --endpoint <driver> <extra...>` with its case dirs in a temp dir
/// of its own: the exit code and the report, after checking that the driver's dir holds no
/// mount and that every case dir is gone.
fn conformance_at(driver: &DriverProcess, extra: &[&str]) -> (Option<i32>, Value) {
    let (code, report, _) = conformance_with_stderr(driver, extra);
    (code, report)
}

fn conformance_with_stderr(driver: &DriverProcess, extra: &[&str]) -> (Option<i32>, Value, String) {
    let endpoint = format!("unix://{}", driver.endpoint());
    let mut args = vec!["--json", "conformance", "--endpoint", &endpoint];
    args.extend(extra);
    let tmp = CaseDirs(short_tempdir("kcsi-conf"));
    let out = kcsi()
        .args(&args)
        .env("TMPDIR", tmp.0.path())
        .stdin(Stdio::null())
        .output()
        .expect("run kcsi");
    assert_nothing_left(driver, tmp.0.path());
    let text = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "not one JSON object ({e}): {text}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), report, stderr)
}

/// Case name → verdict.
fn verdicts(report: &Value) -> BTreeMap<String, String> {
    report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn case<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name} in {report}"))
}

/// Every case of `kcsi conformance --list`.
fn all_cases() -> Vec<String> {
    let out = run(&["--json", "conformance", "--list"]);
    assert_eq!(out.status.code(), Some(0));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    list["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// The run's temp dir; whatever a failed check finds mounted there is unmounted at the end.
struct CaseDirs(tempfile::TempDir);

impl Drop for CaseDirs {
    fn drop(&mut self) {
        unmount_below(self.0.path());
    }
}

/// No mount under the driver's dir or the run's temp dir, and no case dir left in the latter.
fn assert_nothing_left(driver: &DriverProcess, tmp: &Path) {
    assert_eq!(mounts_below(driver.dir.path()), Vec::<String>::new());
    assert_eq!(
        mounts_below(tmp),
        Vec::<String>::new(),
        "mounts left by the cases"
    );
    let left: Vec<_> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "case dirs left: {left:?}");
}

/// The cases hostpath lacks the capability for, by driver flags.
fn skipped_on(flags: &[&str]) -> Vec<&'static str> {
    let attach = flags.contains(&"-enable-attach");
    let limit = flags.iter().any(|f| f.starts_with("-attach-limit"));
    // hostpath has no VOLUME_MOUNT_GROUP, and the run does not say --selinux-mount.
    let mut skipped = vec!["volume.mount-group", "volume.selinux-mount"];
    if !attach {
        skipped.push("attach.controller-publish");
    }
    if !(attach && limit) {
        skipped.push("attach.limit");
    }
    skipped
}

fn passes_every_applicable_case(flags: &[&str]) {
    let mut driver = DriverProcess::hostpath("node-1", flags);
    let (code, report) = conformance(&mut driver, &[]);
    let got = verdicts(&report);
    let skipped = skipped_on(flags);
    let want: BTreeMap<String, String> = all_cases()
        .into_iter()
        .map(|n| {
            let v = if skipped.contains(&n.as_str()) {
                "skip"
            } else {
                "pass"
            };
            (n, v.to_string())
        })
        .collect();
    assert_eq!(got, want, "{report:#}");
    assert_eq!(code, Some(0), "{report:#}");
    assert_eq!(report["ok"], true);
    for name in skipped {
        let reason = case(&report, name)["reason"].as_str().unwrap();
        assert!(
            [
                "PUBLISH_UNPUBLISH_VOLUME",
                "max_volumes",
                "VOLUME_MOUNT_GROUP",
                "--selinux-mount"
            ]
            .iter()
            .any(|why| reason.contains(why)),
            "{name}: {reason}"
        );
    }
}

#[test]
fn hostpath_passes_every_applicable_case() {
    passes_every_applicable_case(&[]);
}

#[test]
fn hostpath_with_attach_passes_the_attach_cases_too() {
    passes_every_applicable_case(&["-enable-attach"]);
}

#[test]
fn hostpath_with_an_attach_limit_passes_the_limit_case() {
    passes_every_applicable_case(&["-enable-attach", "-attach-limit=2"]);
}

/// The driver a case of [`BROKEN`] runs against.
#[derive(Clone, Copy)]
enum Driver {
    /// hostpath with these flags.
    Hostpath(&'static [&'static str]),
    /// hostpath, the run given --selinux-mount (hostpath drops the context option, which a
    /// host without SELinux cannot tell).
    HostpathSeLinuxMount,
    /// The e2e mock driver with -volume-mount-group (it mounts nothing).
    MockMountGroup,
}

use Driver::{Hostpath, HostpathSeLinuxMount, MockMountGroup};

impl Driver {
    /// The driver process and the suite's extra arguments.
    fn start(self) -> (DriverProcess, &'static [&'static str]) {
        match self {
            Hostpath(flags) => (DriverProcess::hostpath("node-1", flags), &[]),
            HostpathSeLinuxMount => (DriverProcess::hostpath("node-1", &[]), &["--selinux-mount"]),
            MockMountGroup => (
                DriverProcess::mock("mock.csi.k8s.io", &["-volume-mount-group"]),
                &[],
            ),
        }
    }
}

/// (case, driver, fault): the fault breaks what the case checks.
const BROKEN: &[(&str, Driver, &str)] = &[
    (
        "registration.plugin-info",
        Hostpath(&[]),
        "error:GetPluginInfo:Internal",
    ),
    (
        "registration.node-info",
        Hostpath(&[]),
        "error:NodeGetInfo@2:Internal",
    ),
    (
        "registration.node-capabilities",
        Hostpath(&[]),
        "error:NodeGetCapabilities@2:Unavailable",
    ),
    (
        "volume.filesystem",
        Hostpath(&[]),
        "error:NodePublishVolume:Internal",
    ),
    (
        "volume.block",
        Hostpath(&[]),
        "error:NodeUnpublishVolume:Internal",
    ),
    (
        "volume.idempotent",
        Hostpath(&[]),
        "error:NodeUnpublishVolume@2:NotFound",
    ),
    (
        "volume.read-only",
        Hostpath(&[]),
        "error:NodePublishVolume:Internal",
    ),
    (
        "volume.access-mode.rwo",
        Hostpath(&[]),
        "error:NodeStageVolume:InvalidArgument",
    ),
    (
        "volume.access-mode.rox",
        Hostpath(&[]),
        "error:NodePublishVolume:InvalidArgument",
    ),
    (
        "volume.access-mode.rwx",
        Hostpath(&[]),
        "error:NodeStageVolume:InvalidArgument",
    ),
    (
        "volume.access-mode.rwop",
        Hostpath(&[]),
        "error:NodePublishVolume:InvalidArgument",
    ),
    (
        "volume.mount-options",
        Hostpath(&[]),
        "error:NodePublishVolume:InvalidArgument",
    ),
    (
        "volume.fs-group",
        Hostpath(&[]),
        "error:NodePublishVolume:PermissionDenied",
    ),
    (
        "volume.mount-group",
        MockMountGroup,
        "error:NodePublishVolume:InvalidArgument",
    ),
    (
        "volume.selinux-mount",
        HostpathSeLinuxMount,
        "error:NodeStageVolume:InvalidArgument",
    ),
    (
        "volume.pod-info",
        Hostpath(&[]),
        "error:NodePublishVolume:InvalidArgument",
    ),
    (
        "volume.secrets",
        Hostpath(&[]),
        "error:NodeStageVolume:Unauthenticated",
    ),
    (
        "stats.usage",
        Hostpath(&[]),
        "error:NodeGetVolumeStats:Internal",
    ),
    (
        "stats.condition",
        Hostpath(&[]),
        "error:NodeGetVolumeStats:Internal",
    ),
    (
        "expand.online",
        Hostpath(&[]),
        "error:NodeExpandVolume:Internal",
    ),
    (
        "expand.offline",
        Hostpath(&[]),
        "error:NodeExpandVolume:FailedPrecondition",
    ),
    (
        "attach.controller-publish",
        Hostpath(&["-enable-attach"]),
        "error:ControllerUnpublishVolume@2:NotFound",
    ),
    (
        "attach.limit",
        Hostpath(&["-enable-attach", "-attach-limit=2"]),
        "error:ControllerPublishVolume@3:Internal",
    ),
    (
        "crash.uncertain-stage",
        Hostpath(&[]),
        "error:NodeStageVolume@2:AlreadyExists",
    ),
    (
        "crash.uncertain-publish",
        Hostpath(&[]),
        "error:NodePublishVolume@2:AlreadyExists",
    ),
    (
        "crash.kill-stage",
        Hostpath(&[]),
        "error:NodeStageVolume@2:AlreadyExists",
    ),
    // The driver answers Unavailable itself: the call was answered, no kill landed in it.
    (
        "crash.kill-publish",
        Hostpath(&[]),
        "error:NodePublishVolume:Unavailable",
    ),
    (
        "crash.kill-unpublish",
        Hostpath(&[]),
        "error:NodeUnpublishVolume@2:Internal",
    ),
    // The connection drops before the driver is called, and kcsi's client sends the call
    // again on a new one: answered, no kill landed in it.
    (
        "crash.kill-unstage",
        Hostpath(&[]),
        "drop:NodeUnstageVolume",
    ),
    (
        "crash.kill-expand",
        Hostpath(&[]),
        "error:NodeExpandVolume@2:Internal",
    ),
    (
        "crash.reconstruct",
        Hostpath(&[]),
        "error:NodeUnstageVolume:Internal",
    ),
    (
        "crash.vol-data-missing",
        Hostpath(&[]),
        "error:NodeUnpublishVolume:NotFound",
    ),
    (
        "crash.vol-data-empty",
        Hostpath(&[]),
        "error:NodeUnstageVolume@2:NotFound",
    ),
];

fn fails_under_a_fault(name: &str, on: Driver, fault: &str) {
    let (mut driver, extra) = on.start();
    let mut args = vec!["--case", name, "--fault", fault];
    args.extend(extra);
    let (code, report) = conformance(&mut driver, &args);
    assert_eq!(verdicts(&report).len(), 1, "{report:#}");
    let c = case(&report, name);
    assert_eq!(c["verdict"], "fail", "{fault}: {report:#}");
    assert_eq!(code, Some(1), "{report:#}");
    let failure = &c["failure"];
    assert!(
        failure["breaks"].as_str().unwrap().contains(".go"),
        "cites upstream: {failure}"
    );
    assert!(
        failure["request"].is_string() && failure["answer"].is_string(),
        "{failure}"
    );
}

#[test]
fn each_case_fails_by_name_under_a_fault_that_breaks_it() {
    let mut covered: Vec<&str> = BROKEN.iter().map(|b| b.0).collect();
    covered.sort();
    let mut all = all_cases();
    all.sort();
    assert_eq!(covered, all, "every case has a fault that breaks it");
    for (name, on, fault) in BROKEN {
        fails_under_a_fault(name, *on, fault);
    }
}

#[test]
fn without_the_driver_command_the_kill_cases_are_skipped_naming_it() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let (code, report) = conformance_at(&driver, &["--case", "crash.kill-*"]);
    assert_eq!(code, Some(0), "{report:#}");
    let got = verdicts(&report);
    assert_eq!(got.len(), 5, "{report:#}");
    for (name, verdict) in got {
        assert_eq!(verdict, "skip", "{name}: {report:#}");
        let reason = case(&report, &name)["reason"].as_str().unwrap();
        assert!(reason.contains("--driver-command"), "{reason}");
    }
}

/// The secrets `volume.secrets` sends: (the call, key, value), as in cli/src/conformance/ctx.rs.
const SECRETS: &[(&str, &str, &str)] = &[
    (
        "NodeStageVolume",
        "kcsi-conformance-stage",
        "kcsi-stage-secret-3f9c1e",
    ),
    (
        "NodePublishVolume",
        "kcsi-conformance-publish",
        "kcsi-publish-secret-8b27d4",
    ),
    (
        "ControllerPublishVolume",
        "kcsi-conformance-attach",
        "kcsi-attach-secret-c41a90",
    ),
];

#[test]
fn secrets_reach_the_driver_and_no_value_shows_in_the_report() {
    let mut driver = DriverProcess::hostpath("node-1", &["-enable-attach"]);
    let dir = short_tempdir("kcsi-secrets");
    let junit = dir.path().join("junit.xml");
    let junit_arg = junit.display().to_string();
    let command = driver.shell_command();
    driver.kill();
    let (code, report, stderr) = conformance_with_stderr(
        &driver,
        &[
            "--driver-command",
            &command,
            "--case",
            "volume.secrets",
            "--junit",
            &junit_arg,
        ],
    );
    assert_eq!(code, Some(0), "{report:#}");
    let shown = [
        report.to_string(),
        stderr,
        std::fs::read_to_string(&junit).unwrap(),
    ];
    for (call, key, value) in SECRETS {
        // hostpath logs each request with its secrets in clear: the driver got them.
        assert_eq!(
            driver.last_request(call)["secrets"][key],
            *value,
            "{call} carried {key}"
        );
        for text in &shown {
            assert!(!text.contains(value), "{value} shown: {text}");
        }
    }
}

#[test]
fn the_mock_driver_with_volume_mount_group_gets_the_fs_group_as_volume_mount_group() {
    // Kubernetes' e2e mock driver mounts nothing: the case checks the calls and says it could
    // not check the group of files at the target. Its other volume cases fail for that reason,
    // so only these two run.
    let driver = DriverProcess::mock("mock.csi.k8s.io", &["-volume-mount-group"]);
    let (code, report) = conformance_at(
        &driver,
        &["--case", "volume.mount-group", "--case", "volume.fs-group"],
    );
    assert_eq!(code, Some(0), "{report:#}");
    let c = case(&report, "volume.mount-group");
    assert_eq!(c["verdict"], "pass", "{report:#}");
    let note = c["note"].as_str().unwrap();
    assert!(
        note.contains("NodeStageVolume and NodePublishVolume carried volume_mount_group \"4321\"")
            && note.contains("nothing is mounted at"),
        "{note}"
    );
    // The driver logged both calls with the fsGroup.
    for call in ["NodeStageVolume", "NodePublishVolume"] {
        let request = driver.last_request(call);
        assert_eq!(
            mount_capability(&request)["volume_mount_group"],
            "4321",
            "{call}: {request}"
        );
    }
    // The kubelet leaves the fsGroup to such a driver: the chown case does not apply.
    let fs_group = case(&report, "volume.fs-group");
    assert_eq!(fs_group["verdict"], "skip", "{report:#}");
    let reason = fs_group["reason"].as_str().unwrap();
    assert!(reason.contains("volume.mount-group"), "{reason}");

    let plain = DriverProcess::mock("mock.csi.k8s.io", &[]);
    let (code, report) = conformance_at(&plain, &["--case", "volume.mount-group"]);
    assert_eq!(code, Some(0), "{report:#}");
    let c = case(&report, "volume.mount-group");
    assert_eq!(c["verdict"], "skip", "{report:#}");
    let reason = c["reason"].as_str().unwrap();
    assert!(reason.contains("VOLUME_MOUNT_GROUP"), "{reason}");
}

#[test]
fn selinux_mount_sends_the_context_option_in_stage_and_publish() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let (code, report) = conformance_at(&driver, &["--case", "volume.selinux-mount"]);
    assert_eq!(code, Some(0), "{report:#}");
    let c = case(&report, "volume.selinux-mount");
    assert_eq!(c["verdict"], "skip", "{report:#}");
    let reason = c["reason"].as_str().unwrap();
    assert!(reason.contains("--selinux-mount"), "{reason}");
    assert!(driver.requests("NodePublishVolume").is_empty());

    let (code, report) = conformance_at(
        &driver,
        &["--case", "volume.selinux-mount", "--selinux-mount"],
    );
    assert_eq!(code, Some(0), "{report:#}");
    let c = case(&report, "volume.selinux-mount");
    assert_eq!(c["verdict"], "pass", "{report:#}");
    // The kubelet's context=%q of the pod's file label, in both calls the driver logged.
    let flag = r#"context="system_u:object_r:container_file_t:s0:c123,c456""#;
    for call in ["NodeStageVolume", "NodePublishVolume"] {
        let request = driver.last_request(call);
        let flags = &mount_capability(&request)["mount_flags"];
        assert_eq!(flags, &serde_json::json!([flag]), "{call}: {request}");
    }
    let note = c["note"].as_str().unwrap();
    assert!(note.contains(flag), "{note}");
    if !Path::new("/sys/fs/selinux").exists() {
        assert!(note.contains("this host has no SELinux"), "{note}");
    }
}

#[test]
fn a_required_mount_option_the_driver_drops_fails_the_mount_options_case() {
    // hostpath v1.18 bind-mounts without the mount_flags it is sent (nodeserver.go
    // NodePublishVolume only logs them): required with --mount-option, noatime is missing.
    let mut driver = DriverProcess::hostpath("node-1", &[]);
    let (code, report) = conformance(
        &mut driver,
        &[
            "--case",
            "volume.mount-options",
            "--mount-option",
            "noatime",
        ],
    );
    let c = case(&report, "volume.mount-options");
    assert_eq!(c["verdict"], "fail", "{report:#}");
    assert_eq!(code, Some(1));
    let what = c["failure"]["what"].as_str().unwrap();
    assert!(what.contains("(missing [\"noatime\"])"), "{what}");
}

#[test]
fn junit_names_every_case_and_its_failure() {
    let mut driver = DriverProcess::hostpath("node-1", &[]);
    let dir = short_tempdir("kcsi-junit");
    let file = dir.path().join("junit.xml");
    let file_arg = file.display().to_string();
    let (code, report) = conformance(
        &mut driver,
        &[
            "--case",
            "registration",
            "--case",
            "attach",
            "--fault",
            "error:NodeGetInfo@2:Internal",
            "--junit",
            &file_arg,
        ],
    );
    assert_eq!(code, Some(1), "{report:#}");
    // Python's XML parser is the oracle: the file parses, and says what --json says.
    let py = r#"
import sys, xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot().find('testsuite')
for t in suite.iter('testcase'):
    v = 'fail' if t.find('failure') is not None else 'skip' if t.find('skipped') is not None else 'pass'
    print(t.get('name'), v)
print('counts', suite.get('tests'), suite.get('failures'), suite.get('skipped'))
"#;
    let out = Command::new("python3")
        .args(["-c", py, &file_arg])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut got: Vec<&str> = text.lines().collect();
    got.sort();
    let mut want: Vec<String> = verdicts(&report)
        .iter()
        .map(|(n, v)| format!("{n} {v}"))
        .collect();
    want.push("counts 5 1 2".into());
    want.sort();
    assert_eq!(got, want);
}

fn one_line_within(args: &[&str], deadline: Duration) -> (Option<i32>, String) {
    let mut child = kcsi()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > deadline {
            let _ = child.kill();
            panic!("kcsi conformance still runs after {deadline:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim().lines().count(), 1, "one line on stderr: {err}");
    (out.status.code(), err)
}

#[test]
fn a_socket_that_is_no_csi_driver_gets_one_line() {
    let dir = short_tempdir("kcsi-notcsi");
    let socket = dir.path().join("not-csi.sock");
    // Accepts connections (the kernel's backlog) and never answers.
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let endpoint = socket.display().to_string();
    let (code, err) = one_line_within(
        &["conformance", "--endpoint", &endpoint, "--timeout", "1"],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("does not answer as a CSI driver must: GetPluginInfo"),
        "{err}"
    );
}

#[test]
fn a_driver_that_hangs_gets_one_line() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let dir = short_tempdir("kcsi-hang");
    let socket = dir.path().join("hang.sock");
    let mut proxy = kcsi()
        .args(["fault-proxy", "--listen"])
        .arg(&socket)
        .arg("--upstream")
        .arg(driver.endpoint())
        .args(["--fault", "hang:NodeGetInfo", "--every"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for("fault proxy socket", Duration::from_secs(20), || {
        socket.exists()
    });
    let endpoint = socket.display().to_string();
    let (code, err) = one_line_within(
        &["conformance", "--endpoint", &endpoint, "--timeout", "1"],
        Duration::from_secs(60),
    );
    let _ = proxy.kill();
    let _ = proxy.wait();
    assert_eq!(code, Some(1));
    assert!(err.contains("NodeGetInfo"), "{err}");
}

#[test]
fn a_pattern_that_matches_no_case_is_bad_input() {
    let out = run(&[
        "conformance",
        "--endpoint",
        "/nonexistent.sock",
        "--case",
        "no-such-case",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"no-such-case\" matches no case"), "{err}");
}
