//! The `kcsi` binary against the real csi-driver-host-path: whole lifecycles (filesystem and
//! block), failing steps through the fault proxy, `--json`, exit codes, SIGINT mid-lifecycle,
//! single steps across invocations, and bad input. Every test checks no mount is left.

use kcsi_testkit as common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::plugin_peers::{Hostpath, Registrar};
use common::{mounts_below, short_tempdir, unmount_below, wait_for, DriverProcess};
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

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `--json` output: exactly one JSON object on stdout.
fn json(o: &Output) -> Value {
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out.trim().lines().count(),
        1,
        "one line of JSON, got:\n{out}\nstderr:\n{}",
        stderr(o)
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn step<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {report}"))
}

fn names(report: &Value) -> Vec<String> {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

/// A kubelet root that is checked for mounts (and cleaned) when the test ends.
struct Root(tempfile::TempDir);

impl Root {
    fn new() -> Root {
        Root(short_tempdir("kcsi-root"))
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn arg(&self) -> String {
        self.path().display().to_string()
    }
    fn assert_no_mounts(&self) {
        assert_eq!(
            mounts_below(self.path()),
            Vec::<String>::new(),
            "mounts left behind"
        );
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        unmount_below(self.path());
    }
}

const FS_STEPS: &[&str] = &[
    "identify",
    "create",
    "register",
    "attach wait",
    "stage",
    "publish",
    "probe",
    "stats",
    "restart",
    "reconstruct",
    "unpublish",
    "unstage",
    "deregister",
    "delete",
];

/// `kcsi <global...> lifecycle --endpoint <driver> --root <root> <extra...>`.
fn lifecycle_with(driver: &DriverProcess, root: &Root, global: &[&str], extra: &[&str]) -> Output {
    let endpoint = format!("unix://{}", driver.endpoint());
    let root = root.arg();
    let mut args = global.to_vec();
    args.extend(["lifecycle", "--endpoint", &endpoint, "--root", &root]);
    args.extend(extra);
    run(&args)
}

/// A lifecycle with `--json` after the subcommand.
fn lifecycle(driver: &DriverProcess, root: &Root, extra: &[&str]) -> Output {
    lifecycle_with(driver, root, &[], &[&["--json"][..], extra].concat())
}

#[test]
fn lifecycle_passes_every_step_on_a_filesystem_volume() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let out = lifecycle(
        &driver,
        &root,
        &["--create", "10Mi", "--driver", common::DRIVER],
    );
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report}\n{}", stderr(&out));
    assert_eq!(report["ok"], true);
    assert_eq!(names(&report), FS_STEPS);
    assert_eq!(step(&report, "attach wait")["skipped"], true);
    let publish = step(&report, "publish");
    assert_eq!(publish["grpcCode"], 0);
    assert!(publish["durationMs"].as_f64().unwrap() > 0.0);
    assert_eq!(publish["rpcs"][0]["method"], "NodePublishVolume");
    root.assert_no_mounts();
    let csi_dir = root.path().join("pods/kcsi-pod/volumes/kubernetes.io~csi");
    assert_eq!(
        csi_dir.read_dir().unwrap().count(),
        0,
        "the volume's dir is removed"
    );
}

#[test]
fn json_and_verbose_are_global_flags_before_or_after_the_subcommand() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let before = lifecycle_with(&driver, &root, &["--json", "-v"], &["--create", "8Mi"]);
    let after = lifecycle(&driver, &root, &["--create", "8Mi", "-v"]);
    for out in [&before, &after] {
        let report = json(out);
        assert_eq!(out.status.code(), Some(0), "{report}\n{}", stderr(out));
        assert_eq!(report["ok"], true);
        assert_eq!(names(&report), FS_STEPS);
    }
    for args in [
        ["--json", "list", "--root", &root.arg()],
        ["list", "--root", &root.arg(), "--json"],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(json(&out)["volumes"], serde_json::json!([]));
    }
    root.assert_no_mounts();
}

#[test]
fn lifecycle_moves_bytes_through_a_block_volume() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let out = lifecycle(&driver, &root, &["--create", "8Mi", "--block"]);
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report}\n{}", stderr(&out));
    assert_eq!(names(&report), FS_STEPS);
    root.assert_no_mounts();
}

#[test]
fn human_output_shows_requests_responses_and_a_summary() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let secrets = root.path().join("secrets.json");
    std::fs::write(
        &secrets,
        r#"{"NodePublishVolumeSecret":{"password":"hunter2"}}"#,
    )
    .unwrap();
    let endpoint = driver.endpoint();
    let out = run(&[
        "lifecycle",
        "--endpoint",
        &endpoint,
        "--root",
        &root.arg(),
        "--create",
        "10Mi",
        "--secrets",
        &secrets.display().to_string(),
        "--attribute",
        "color=blue",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("-> NodePublishVolume NodePublishVolumeRequest {"),
        "{text}"
    );
    assert!(text.contains("\"password\": \"<redacted>\""), "{text}");
    assert!(!text.contains("hunter2"), "a secret was printed:\n{text}");
    assert!(text.contains("\"color\": \"blue\""), "{text}");
    assert!(text.contains("<- NodeStageVolume OK in"), "{text}");
    assert!(text.contains("summary: PASS (14/14 steps passed"), "{text}");
    root.assert_no_mounts();
}

#[test]
fn hang_in_stage_is_uncertain_and_cleaned_up() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let out = lifecycle(
        &driver,
        &root,
        &[
            "--create",
            "10Mi",
            "--fault",
            "hang:NodeStageVolume",
            "--timeout",
            "1",
        ],
    );
    let report = json(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert_eq!(report["ok"], false);
    let stage = step(&report, "stage");
    assert_eq!(stage["ok"], false);
    assert_eq!(stage["class"], "uncertain");
    assert!(
        stage["error"].as_str().unwrap().contains("deadline"),
        "{stage}"
    );
    // Uncertain means it may be staged: the clean-up unstages, then deletes the volume.
    assert_eq!(step(&report, "unstage")["ok"], true);
    assert_eq!(step(&report, "delete")["ok"], true);
    root.assert_no_mounts();
}

#[test]
fn driver_error_in_publish_is_final_with_its_grpc_code() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let out = lifecycle(
        &driver,
        &root,
        &[
            "--create",
            "10Mi",
            "--fault",
            "error:NodePublishVolume:InvalidArgument:bad target",
        ],
    );
    let report = json(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let publish = step(&report, "publish");
    assert_eq!(publish["class"], "final");
    assert_eq!(publish["grpcCode"], 3);
    assert!(
        publish["error"].as_str().unwrap().contains("bad target"),
        "{publish}"
    );
    let transient = lifecycle(
        &driver,
        &root,
        &[
            "--create",
            "10Mi",
            "--fault",
            "error:NodeStageVolume:Unavailable",
        ],
    );
    let stage = step(&json(&transient), "stage").clone();
    assert_eq!(
        (stage["class"].as_str(), stage["grpcCode"].as_i64()),
        (Some("uncertain"), Some(14))
    );
    root.assert_no_mounts();
}

#[test]
fn driver_killed_mid_publish_is_uncertain_and_leaves_no_mount() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let out = lifecycle(
        &driver,
        &root,
        &["--create", "10Mi", "--fault", "kill:NodePublishVolume"],
    );
    let report = json(&out);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let publish = step(&report, "publish");
    assert_eq!(publish["class"], "uncertain", "{publish}");
    // The driver is gone, so kcsi's clean-up cannot unpublish; it unmounts the target itself.
    assert_eq!(step(&report, "unpublish")["ok"], false);
    let leftovers = step(&report, "unmount leftovers");
    assert!(
        leftovers["error"].as_str().unwrap().contains("/mount"),
        "{leftovers}"
    );
    root.assert_no_mounts();
}

#[test]
fn sigint_mid_lifecycle_cleans_up_and_exits_130() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let endpoint = driver.endpoint();
    let mut child = kcsi()
        .args([
            "lifecycle",
            "--endpoint",
            &endpoint,
            "--root",
            &root.arg(),
            "--create",
            "10Mi",
            "--fault",
            "delay:NodePublishVolume:3s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let publishing = line.contains("delaying the call");
        seen.push(line);
        if publishing {
            break;
        }
    }
    assert!(seen.iter().any(|l| l.contains("PASS stage")), "{seen:?}");
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    let text = rest.join("\n");
    assert_eq!(status.code(), Some(130), "{text}");
    assert!(
        text.contains("FAIL publish") && text.contains("interrupted"),
        "{text}"
    );
    assert!(
        text.contains("PASS unpublish")
            && text.contains("PASS unstage")
            && text.contains("PASS delete"),
        "{text}"
    );
    root.assert_no_mounts();
}

#[test]
fn create_volume_prints_the_new_id_and_delete_volume_removes_it() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let endpoint = driver.endpoint();
    for (name, block) in [("made-fs", false), ("made-block", true)] {
        let mut args = vec!["create-volume", "--endpoint", &endpoint, "--name", name];
        args.extend(["--size", "8Mi"]);
        if block {
            args.push("--block");
        }
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let vol = driver
            .volumes()
            .into_iter()
            .find(|v| v["VolID"] == id.as_str())
            .unwrap_or_else(|| panic!("the driver has no volume {id:?}"));
        assert_eq!(vol["VolName"], name);
        assert_eq!(vol["VolSize"], 8 << 20);
        let out = run(&[
            "delete-volume",
            "--endpoint",
            &endpoint,
            "--volume-handle",
            &id,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(!driver.volumes().iter().any(|v| v["VolID"] == id.as_str()));
    }
}

#[test]
fn create_volume_with_bad_input_exits_2_and_a_driver_refusal_exits_1() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let endpoint = driver.endpoint();
    let out = run(&[
        "create-volume",
        "--endpoint",
        "/nonexistent/csi.sock",
        "--name",
        "v",
        "--size",
        "1Mi",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = run(&[
        "create-volume",
        "--endpoint",
        &endpoint,
        "--name",
        "v",
        "--size",
        "lots",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--size"), "{}", stderr(&out));
    let out = run(&[
        "delete-volume",
        "--endpoint",
        &endpoint,
        "--volume-handle",
        "",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("DeleteVolume failed"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn single_steps_keep_their_state_on_disk_between_invocations() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    for block in [false, true] {
        let handle = driver.create_volume(
            if block { "single-block" } else { "single-fs" },
            block,
            8 << 20,
        );
        let endpoint = driver.endpoint();
        let base = [
            "--endpoint",
            endpoint.as_str(),
            "--root",
            &root.arg(),
            "--volume-handle",
            &handle,
            "--json",
        ];
        let with = |cmd: &str, extra: &[&str]| {
            let mut a = vec![cmd];
            a.extend(base);
            a.extend(extra);
            let out = run(&a);
            let report = json(&out);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{cmd}: {report}\n{}",
                stderr(&out)
            );
            report
        };
        let mode: &[&str] = if block { &["--block"] } else { &[] };
        with("stage", mode);
        with("publish", mode);

        let list = run(&["list", "--root", &root.arg(), "--json"]);
        let volumes = json(&list)["volumes"].as_array().unwrap().clone();
        let kinds: Vec<&str> = volumes
            .iter()
            .map(|v| v["kind"].as_str().unwrap())
            .collect();
        if block {
            assert_eq!(kinds, ["block"], "{volumes:?}");
        } else {
            assert_eq!(kinds, ["staged", "published"], "{volumes:?}");
            assert_eq!(volumes[1]["mounted"], true);
            assert_eq!(volumes[1]["volumeHandle"], handle.as_str());
        }
        let rebuilt = json(&run(&["reconstruct", "--root", &root.arg(), "--json"]));
        assert_eq!(
            rebuilt["volumes"][0]["spec"]["persistentVolume"]["spec"]["csi"]["volumeHandle"],
            handle.as_str(),
            "{rebuilt}"
        );
        with("stats", &[]);
        let mut grow = vec!["--new-size", "16Mi", "--controller"];
        grow.extend(mode);
        let grown = with("expand", &grow);
        assert_eq!(step(&grown, "controller expand")["ok"], true, "{grown}");
        with("unpublish", &[]);
        with("unstage", &[]);
        root.assert_no_mounts();
        let after = json(&run(&["list", "--root", &root.arg(), "--json"]));
        assert_eq!(after["volumes"], serde_json::json!([]), "{after}");
    }
}

/// A volume left staged with no pod dir publishing it (a kubelet killed between NodeUnpublish
/// and NodeUnstage, kubernetes#85476) gets a `to do` from `kcsi list`, and running exactly that
/// unstages it, also when its `vol_data.json` is lost (then the SHA-256 of its handle, from
/// `sha256sum`, names it). A published volume gets none.
#[test]
fn list_says_how_to_unstage_a_volume_left_staged_and_doing_so_unstages_it() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let endpoint = driver.endpoint();
    let staged_row = || {
        let listed = json(&run(&["list", "--root", &root.arg(), "--json"]));
        let volumes = listed["volumes"].as_array().unwrap().clone();
        volumes
            .into_iter()
            .find(|v| v["kind"] == "staged")
            .unwrap_or_else(|| panic!("nothing staged: {listed}"))
    };
    for lose_record in [false, true] {
        let handle =
            driver.create_volume(if lose_record { "lost" } else { "left" }, false, 8 << 20);
        let base = [
            "--endpoint",
            endpoint.as_str(),
            "--root",
            &root.arg(),
            "--volume-handle",
            &handle,
            "--json",
        ];
        for cmd in ["stage", "publish", "unpublish"] {
            if cmd == "unpublish" {
                assert_eq!(
                    staged_row()["action"],
                    Value::Null,
                    "a published volume needs nothing done"
                );
            }
            let out = run(&[&[cmd][..], &base[..]].concat());
            assert_eq!(out.status.code(), Some(0), "{cmd}: {}", stderr(&out));
        }
        let sha = String::from_utf8(
            Command::new("sh")
                .args(["-c", "printf %s \"$0\" | sha256sum", &handle])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let sha = sha.split_whitespace().next().unwrap();
        let global = root
            .path()
            .join("plugins/kubernetes.io/csi/hostpath.csi.k8s.io")
            .join(sha);
        if lose_record {
            std::fs::remove_file(global.join("vol_data.json")).unwrap();
        }
        let row = staged_row();
        let action = row["action"]
            .as_str()
            .unwrap_or_else(|| panic!("no action: {row}"));
        assert!(!lose_record || action.contains(sha), "{action}");
        let line = &action[action
            .find("kcsi unstage")
            .unwrap_or_else(|| panic!("{action}"))..];
        let line = line
            .replace("<hostpath.csi.k8s.io's socket>", &endpoint)
            .replace("<its volumeHandle>", &handle);
        let args: Vec<&str> = line.split_whitespace().skip(1).chain(["--json"]).collect();
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{line}: {}", stderr(&out));
        let unstaged = driver.last_request("NodeUnstageVolume");
        assert_eq!(unstaged["volume_id"], handle.as_str(), "{unstaged}");
        assert_eq!(
            driver.volume_paths(&handle).0,
            Vec::<String>::new(),
            "the driver still has it staged"
        );
        assert!(!global.exists(), "{} is still there", global.display());
        let after = json(&run(&["list", "--root", &root.arg(), "--json"]));
        assert_eq!(after["volumes"], serde_json::json!([]), "{after}");
        root.assert_no_mounts();
    }
}

#[test]
fn fault_proxy_subcommand_stands_in_front_of_a_real_driver() {
    let driver = DriverProcess::hostpath("node-1", &[]);
    let root = Root::new();
    let listen = root.path().join("proxy.sock");
    let mut proxy = kcsi()
        .args([
            "fault-proxy",
            "--listen",
            &listen.display().to_string(),
            "--upstream",
            &driver.endpoint(),
            "--fault",
            "error:NodeGetInfo:ResourceExhausted:busy",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for("proxy socket", Duration::from_secs(10), || listen.exists());
    let out = run(&[
        "lifecycle",
        "--endpoint",
        &listen.display().to_string(),
        "--root",
        &root.arg(),
        "--volume-handle",
        "v",
        "--json",
    ]);
    let report = json(&out);
    let register = step(&report, "register");
    assert_eq!(
        (register["ok"].as_bool(), register["grpcCode"].as_i64()),
        (Some(false), Some(8)),
        "{report}"
    );
    unsafe { libc::kill(proxy.id() as i32, libc::SIGTERM) };
    assert!(proxy.wait().unwrap().success());
    root.assert_no_mounts();
}

/// One line on stderr, no panic text, the given exit status.
fn assert_one_line_error(out: &Output, code: i32, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line, got:\n{err}");
    assert!(err.starts_with("kcsi: ") && err.contains(needle), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

#[test]
fn bad_input_gets_one_line_and_a_nonzero_exit() {
    let root = Root::new();
    let r = root.arg();
    assert_one_line_error(&run(&["lifecycle", "--bogus"]), 2, "--bogus");
    assert_one_line_error(
        &run(&["lifecycle", "--endpoint", "/x"]),
        2,
        "--volume-handle",
    );
    assert_one_line_error(
        &run(&[
            "lifecycle",
            "--endpoint",
            "/x",
            "--volume-handle",
            "v",
            "--fault",
            "hang:Nope",
        ]),
        2,
        "names no CSI method",
    );
    let file = root.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let f = file.display().to_string();
    assert_one_line_error(
        &run(&["lifecycle", "--endpoint", &f, "--volume-handle", "v"]),
        2,
        "not a Unix socket",
    );
    assert_one_line_error(
        &run(&[
            "lifecycle",
            "--endpoint",
            "/no/such.sock",
            "--volume-handle",
            "v",
        ]),
        2,
        "No such file",
    );
    assert_one_line_error(
        &run(&[
            "lifecycle",
            "--endpoint",
            "relative.sock",
            "--volume-handle",
            "v",
        ]),
        2,
        "absolute",
    );

    // A socket that speaks no gRPC, and one that never answers.
    let garbage = root.path().join("garbage.sock");
    let silent = root.path().join("silent.sock");
    let g = std::os::unix::net::UnixListener::bind(&garbage).unwrap();
    let s = std::os::unix::net::UnixListener::bind(&silent).unwrap();
    std::thread::spawn(move || {
        for c in g.incoming().flatten() {
            let mut c = c;
            let _ = std::io::Write::write_all(&mut c, b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    let _keep = std::thread::spawn(move || {
        let held: Vec<_> = s.incoming().take(8).flatten().collect();
        std::thread::sleep(Duration::from_secs(30));
        drop(held);
    });
    let out = run(&[
        "lifecycle",
        "--endpoint",
        &garbage.display().to_string(),
        "--volume-handle",
        "v",
        "--root",
        &r,
        "--timeout",
        "2",
    ]);
    assert_one_line_error(&out, 1, "does not answer as a CSI driver");
    let out = run(&[
        "lifecycle",
        "--endpoint",
        &silent.display().to_string(),
        "--volume-handle",
        "v",
        "--root",
        &r,
        "--timeout",
        "1",
        "--json",
    ]);
    assert_one_line_error(&out, 1, "does not answer as a CSI driver");
    assert_eq!(json(&out)["ok"], false);

    let driver = DriverProcess::hostpath("node-1", &[]);
    let missing = root.path().join("missing.json").display().to_string();
    let out = run(&[
        "lifecycle",
        "--endpoint",
        &driver.endpoint(),
        "--volume-handle",
        "v",
        "--secrets",
        &missing,
    ]);
    assert_one_line_error(&out, 2, "cannot read secrets file");
    let out = run(&[
        "stage",
        "--endpoint",
        &driver.endpoint(),
        "--volume-handle",
        "v",
        "--root",
        &r,
        "--driver",
        "other.csi",
    ]);
    assert_one_line_error(&out, 1, "other.csi");
    root.assert_no_mounts();
}

#[test]
fn watch_prints_the_driver_the_real_registrar_registers_and_its_removal() {
    let root = Root(short_tempdir("kcsi-watch"));
    let registry = root.0.path().join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let mut watch = kcsi()
        .args(["watch", "--root", root.0.path().to_str().unwrap(), "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let driver = Hostpath::start(root.0.path(), "watch.csi.k8s.io", "node-w");
    let mut registrar = Registrar::for_driver(&driver, &registry);
    let event = |lines: &mut std::io::Lines<BufReader<std::process::ChildStdout>>| -> Value {
        serde_json::from_str(&lines.next().expect("an event line").unwrap()).unwrap()
    };
    let registered = event(&mut lines);
    assert_eq!(registered["event"], "registered", "{registered}");
    assert_eq!(registered["driver"]["name"], "watch.csi.k8s.io");
    assert_eq!(registered["driver"]["nodeId"], "node-w");
    registrar.process.stop_with(libc::SIGTERM);
    let gone = event(&mut lines);
    assert_eq!(gone["event"], "deregistered", "{gone}");
    unsafe { libc::kill(watch.id() as i32, libc::SIGINT) };
    wait_for("kcsi watch to exit", Duration::from_secs(10), || {
        watch.try_wait().unwrap().is_some()
    });
    assert_eq!(watch.wait().unwrap().code(), Some(0));
}
