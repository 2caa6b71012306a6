//! The plugin watcher driven by the real node-driver-registrar in front of the real hostpath
//! driver, laid out as a DaemonSet does; bad registration sockets come from
//! `FaultyRegistrationServer`.

use kcsi_testkit as common;

use std::ffi::{CStr, CString};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::plugin_peers::{
    driver_socket, plugin_info, Answer, FaultyRegistrationServer, Hostpath, Registrar,
};
use common::{driver_names, short_tempdir, wait_for};
use kcsi::HostConfig;
use kcsi::NodeAgent;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

/// A standalone host watching `<root>/plugins_registry` (or `registry`).
struct Watched {
    root: tempfile::TempDir,
    host: Arc<NodeAgent>,
}

impl Watched {
    fn new(node: &str) -> Watched {
        Self::with(node, None)
    }

    fn with(node: &str, registry: Option<&Path>) -> Watched {
        let root = short_tempdir("kcsi-w");
        let host = start_host(HostConfig {
            plugins_registry_dir: registry.map(Path::to_path_buf),
            ..watching(node, root.path())
        });
        Watched { root, host }
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    fn registry(&self) -> PathBuf {
        self.root().join("plugins_registry")
    }

    fn listed(&self) -> Vec<String> {
        driver_names(&self.host)
    }

    fn socket(&self, path: &Path) -> Option<Value> {
        socket_state(&self.host, path)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.host.stop();
    }
}

/// A node host with the plugin watcher on.
fn watching(node: &str, root: &Path) -> HostConfig {
    HostConfig {
        plugin_watcher: true,
        ..HostConfig::node(node, root)
    }
}

fn start_host(config: HostConfig) -> Arc<NodeAgent> {
    let _rt = kcsi::runtime_handle().unwrap().enter();
    NodeAgent::start(config.check().unwrap()).unwrap()
}

/// The host's status, in kcsi_host_status' JSON form.
fn status_json(host: &NodeAgent) -> Value {
    let mut status = serde_json::to_value(host.status()).unwrap();
    status["pluginWatcher"] = serde_json::to_value(host.plugin_watcher_status()).unwrap();
    status
}

fn socket_state(host: &NodeAgent, path: &Path) -> Option<Value> {
    status_json(host)["pluginWatcher"]["sockets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"].as_str() == Some(path.to_str().unwrap()))
        .cloned()
}

fn state_is(w: &Watched, path: &Path, state: &str) -> bool {
    w.socket(path).is_some_and(|s| s["state"] == state)
}

/// Runs `f` with kcsi's runtime entered (the fault server spawns on it).
fn in_runtime<T>(f: impl FnOnce() -> T) -> T {
    let _rt = kcsi::runtime_handle().unwrap().enter();
    f()
}

#[test]
fn real_registrar_registers_the_real_hostpath_driver() {
    let w = Watched::new("node-reg");
    let driver = Hostpath::start(w.root(), "hostpath.csi.k8s.io", "node-reg");
    let start = Instant::now();
    let reg = Registrar::for_driver(&driver, &w.registry());
    // Poll tightly to time socket creation -> registered.
    let mut created = None;
    let registered = loop {
        if created.is_none() && reg.socket.exists() {
            created = Some(Instant::now());
        }
        if w.listed() == ["hostpath.csi.k8s.io"] {
            break Instant::now();
        }
        assert!(
            start.elapsed() < WAIT,
            "driver not registered: {:#}",
            status_json(&w.host)
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let created = created.unwrap_or(registered);
    println!(
        "figure: registrar start -> registered {:?}; socket creation -> registered {:?}",
        registered - start,
        registered - created
    );
    wait_for("notified", WAIT, || state_is(&w, &reg.socket, "registered"));
    let drivers = serde_json::to_value(w.host.drivers_status()).unwrap();
    assert_eq!(drivers[0]["nodeId"], "node-reg");
    assert_eq!(drivers[0]["endpoint"], driver.socket.to_str().unwrap());
    assert_eq!(drivers[0]["maxVolumesPerNode"], 16);
    let s = w.socket(&reg.socket).unwrap();
    assert_eq!(s["state"], "registered", "{s:#}");
    assert_eq!(s["driver"], "hostpath.csi.k8s.io");
    assert_eq!(s["attempts"], 1);
    let status = status_json(&w.host);
    assert_eq!(
        status["pluginWatcher"]["dir"],
        w.registry().to_str().unwrap()
    );
    assert_eq!(status["pluginWatcher"]["socketsSeen"], 1);
    // The registrar heard `true`.
    let log = reg.process.log_text();
    assert!(
        log.contains("Received NotifyRegistrationStatus call"),
        "{log}"
    );
    assert!(
        log.contains("PluginRegistered:true") || log.contains("plugin_registered:true"),
        "{log}"
    );
}

#[test]
fn registrar_stopped_deregisters_and_restarted_registers_again() {
    let w = Watched::new("node-restart");
    let driver = Hostpath::start(w.root(), "hostpath.csi.k8s.io", "node-restart");
    let mut reg = Registrar::for_driver(&driver, &w.registry());
    wait_for("registered", WAIT, || w.listed().len() == 1);

    // SIGTERM, as the kubelet stops a container: the registrar removes its socket.
    let exit = reg.process.stop_with(libc::SIGTERM).unwrap();
    assert!(exit.success(), "{exit:?}");
    wait_for("deregistered", WAIT, || w.listed().is_empty());
    assert!(w.socket(&reg.socket).is_none());

    reg.restart();
    wait_for("registered again", WAIT, || {
        state_is(&w, &reg.socket, "registered")
    });
    assert_eq!(w.listed().len(), 1);
    assert_eq!(status_json(&w.host)["pluginWatcher"]["socketsSeen"], 2);

    // SIGKILL leaves the socket file (as upstream, no deregistration); the next registrar
    // replaces the stale file, which is a new socket: re-registered.
    reg.process.stop_with(libc::SIGKILL);
    assert!(reg.socket.exists());
    assert_eq!(w.listed().len(), 1);
    reg.restart();
    wait_for("third socket seen", WAIT, || {
        status_json(&w.host)["pluginWatcher"]["socketsSeen"] == 3
            && state_is(&w, &reg.socket, "registered")
    });
    assert_eq!(w.listed(), ["hostpath.csi.k8s.io"]);
}

#[test]
fn wrong_registration_path_is_told_to_the_registrar_which_exits() {
    let w = Watched::new("node-wrong");
    let driver = Hostpath::start(w.root(), "hostpath.csi.k8s.io", "node-wrong");
    let wrong = w.root().join("plugins/nowhere/csi.sock");
    let mut reg = Registrar::start(
        &driver.name,
        &driver.socket,
        wrong.to_str().unwrap(),
        &w.registry(),
        w.root().join("registrar.log"),
    );
    let exit = reg.process.wait_exit(WAIT).expect("registrar did not exit");
    assert_eq!(exit.code(), Some(1), "{exit:?}");
    let log = reg.process.log_text();
    assert!(
        log.contains("Registration process failed with error"),
        "{log}"
    );
    assert!(log.contains("plugin registration failed with err"), "{log}");
    assert!(log.contains(wrong.to_str().unwrap()), "{log}");
    assert!(w.listed().is_empty());
    // The registrar died without removing its socket: kcsi keeps retrying it, the last error
    // visible, until the file goes away.
    wait_for("retrying with the error", WAIT, || {
        w.socket(&reg.socket)
            .is_some_and(|s| s["state"] == "retrying" && s["attempts"].as_u64().unwrap() >= 2)
    });
    let s = w.socket(&reg.socket).unwrap();
    assert!(
        s["lastError"].as_str().unwrap().contains("dial failed"),
        "{s:#}"
    );
    std::fs::remove_file(&reg.socket).unwrap();
    wait_for("socket forgotten", WAIT, || w.socket(&reg.socket).is_none());
}

#[test]
fn driver_restarted_behind_a_running_registrar_stays_registered_and_usable() {
    let w = Watched::new("node-drv");
    let mut driver = Hostpath::start(w.root(), "hostpath.csi.k8s.io", "node-drv");
    let _reg = Registrar::for_driver(&driver, &w.registry());
    wait_for("registered", WAIT, || w.listed().len() == 1);
    driver.restart();
    assert_eq!(w.listed(), ["hostpath.csi.k8s.io"]);
    let d = w.host.driver("hostpath.csi.k8s.io").unwrap();
    let info = kcsi::block_on(|| {
        d.client
            .node_get_info(tokio::time::Instant::now() + Duration::from_secs(10))
    })
    .unwrap()
    .expect("NodeGetInfo through the restarted driver");
    assert_eq!(info.node_id, "node-drv");
}

#[test]
fn stale_socket_without_listener_is_retried_never_registered_and_then_replaced() {
    let root = short_tempdir("kcsi-w");
    let registry = root.path().join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let stale = registry.join("hostpath.csi.k8s.io-reg.sock");
    drop(UnixListener::bind(&stale).unwrap());
    let w = Watched {
        host: start_host(watching("node-stale", root.path())),
        root,
    };
    wait_for("stale socket retried", WAIT, || {
        w.socket(&stale)
            .is_some_and(|s| s["state"] == "retrying" && s["attempts"].as_u64().unwrap() >= 2)
    });
    let s = w.socket(&stale).unwrap();
    assert!(
        s["lastError"]
            .as_str()
            .unwrap()
            .contains("onnection refused"),
        "{s:#}"
    );
    assert!(w.listed().is_empty());
    // A registrar starting at that path removes the stale file and serves a new socket.
    let driver = Hostpath::start(w.root(), "hostpath.csi.k8s.io", "node-stale");
    let _reg = Registrar::for_driver(&driver, &w.registry());
    wait_for("registered", WAIT, || state_is(&w, &stale, "registered"));
    assert_eq!(w.listed(), ["hostpath.csi.k8s.io"]);
}

#[test]
fn socket_appearing_while_the_host_starts_is_registered_once() {
    for round in 0..3 {
        let root = short_tempdir("kcsi-w");
        let registry = root.path().join("plugins_registry");
        std::fs::create_dir_all(&registry).unwrap();
        let driver = Hostpath::start(root.path(), "hostpath.csi.k8s.io", "node-race");
        let reg = Registrar::for_driver(&driver, &registry);
        // Started at once: the registration socket appears during or after the start-up walk.
        let w = Watched {
            host: start_host(watching("node-race", root.path())),
            root,
        };
        wait_for("registered", WAIT, || {
            state_is(&w, &reg.socket, "registered")
        });
        let status = status_json(&w.host);
        assert_eq!(
            status["pluginWatcher"]["socketsSeen"], 1,
            "round {round}: {status:#}"
        );
        assert_eq!(
            w.socket(&reg.socket).unwrap()["attempts"],
            1,
            "round {round}"
        );
        assert_eq!(w.listed(), ["hostpath.csi.k8s.io"]);
    }
}

#[test]
fn ten_drivers_register_at_once_and_all_deregister() {
    let w = Watched::new("node-ten");
    let drivers: Vec<Hostpath> = (0..10)
        .map(|i| Hostpath::start(w.root(), &format!("hostpath-{i}.csi.k8s.io"), "node-ten"))
        .collect();
    let start = Instant::now();
    let mut regs: Vec<Registrar> = drivers
        .iter()
        .map(|d| Registrar::for_driver(d, &w.registry()))
        .collect();
    wait_for("ten registered", Duration::from_secs(60), || {
        w.listed().len() == 10
    });
    println!(
        "figure: 10 registrars started -> 10 drivers registered {:?}",
        start.elapsed()
    );
    let mut expected: Vec<String> = (0..10)
        .map(|i| format!("hostpath-{i}.csi.k8s.io"))
        .collect();
    expected.sort();
    assert_eq!(w.listed(), expected);
    let start = Instant::now();
    for r in &mut regs {
        r.process.stop_with(libc::SIGTERM);
    }
    wait_for("all deregistered", WAIT, || w.listed().is_empty());
    println!(
        "figure: 10 registrars stopped -> all deregistered {:?}",
        start.elapsed()
    );
}

#[test]
fn two_hosts_watch_two_dirs_and_see_only_their_own_driver() {
    let custom = short_tempdir("kcsi-reg");
    let a = Watched::new("node-a");
    let b = Watched::with("node-b", Some(custom.path()));
    let da = Hostpath::start(a.root(), "a.csi.k8s.io", "node-a");
    let db = Hostpath::start(b.root(), "b.csi.k8s.io", "node-b");
    let _ra = Registrar::for_driver(&da, &a.registry());
    let _rb = Registrar::for_driver(&db, custom.path());
    wait_for("both registered", WAIT, || {
        a.listed() == ["a.csi.k8s.io"] && b.listed() == ["b.csi.k8s.io"]
    });
    assert_eq!(
        status_json(&b.host)["pluginWatcher"]["dir"],
        custom.path().to_str().unwrap()
    );
    // b's default registry dir is not watched.
    assert!(!b.registry().exists());
}

/// Log lines mentioning `needle`, collected from kcsi's log sink.
fn capture_logs() -> Arc<Mutex<Vec<String>>> {
    static LINES: std::sync::OnceLock<Arc<Mutex<Vec<String>>>> = std::sync::OnceLock::new();
    LINES
        .get_or_init(|| {
            let lines = Arc::new(Mutex::new(Vec::new()));
            let sink = lines.clone();
            kcsi::set_log_sink(
                Some(Arc::new(move |_, _, msg: &str| {
                    sink.lock().unwrap().push(msg.to_string())
                })),
                2,
            );
            lines
        })
        .clone()
}

#[test]
fn bad_registration_sockets_are_retried_with_backoff_logged_once_and_nothing_registers() {
    let logs = capture_logs();
    let w = Watched::new("node-bad");
    let reg = w.registry();
    let endpoint = driver_socket(w.root(), "x").display().to_string();
    let cases: Vec<(&str, Answer, &str)> = vec![
        (
            "dra-reg.sock",
            Answer::Info(plugin_info("DRAPlugin", "dra.example.com", "", &["1.0.0"])),
            "no handler registered for plugin type: DRAPlugin",
        ),
        (
            "garbage-reg.sock",
            // Field 2 (name) holding bytes that are not UTF-8.
            Answer::Bytes(vec![
                0x0a, 0x09, b'C', b'S', b'I', b'P', b'l', b'u', b'g', b'i', b'n', 0x12, 0x02, 0xff,
                0xfe,
            ]),
            "the answer is not a PluginInfo",
        ),
        (
            "escape-reg.sock",
            Answer::Info(plugin_info(
                "CSIPlugin",
                "../../../etc",
                &endpoint,
                &["1.0.0"],
            )),
            "is not safe",
        ),
        (
            "empty-reg.sock",
            Answer::Info(plugin_info("CSIPlugin", "", &endpoint, &["1.0.0"])),
            "is not safe",
        ),
        (
            "relative-reg.sock",
            Answer::Info(plugin_info(
                "CSIPlugin",
                "rel.csi.k8s.io",
                "plugins/rel/csi.sock",
                &["1.0.0"],
            )),
            "not an absolute Unix socket path",
        ),
        (
            "versions-reg.sock",
            Answer::Info(plugin_info(
                "CSIPlugin",
                "old.csi.k8s.io",
                &endpoint,
                &["0.3.0"],
            )),
            "None of the versions specified",
        ),
    ];
    let servers: Vec<(FaultyRegistrationServer, &str)> = in_runtime(|| {
        cases
            .into_iter()
            .map(|(file, answer, expect)| {
                (
                    FaultyRegistrationServer::start(&reg.join(file), answer),
                    expect,
                )
            })
            .collect()
    });
    // Not a registration server: the real hostpath driver serving its CSI socket in the
    // registry dir.
    let csi = Hostpath::start(w.root(), "csi-in-registry", "node-bad");
    let csi_in_registry = reg.join("csi-in-registry.sock");
    std::fs::rename(&csi.socket, &csi_in_registry).unwrap();

    // A listener that never answers: retried (it might be a registrar still starting), its
    // error logged once however often it is retried.
    let silent_path = reg.join("silent-reg.sock");
    let _silent = UnixListener::bind(&silent_path).unwrap();

    for (server, expect) in &servers {
        wait_for(expect, WAIT, || state_is(&w, &server.socket, "retrying"));
        let s = w.socket(&server.socket).unwrap();
        assert!(s["lastError"].as_str().unwrap().contains(expect), "{s:#}");
        // Told, as upstream, except when its GetInfo answer could not be read.
        if !expect.contains("not a PluginInfo") {
            let statuses = server.statuses();
            assert!(!statuses.is_empty(), "{}", server.socket.display());
            assert!(!statuses[0].plugin_registered);
            assert!(statuses[0].error.contains(expect), "{:?}", statuses[0]);
        }
    }
    wait_for("CSI socket retried", WAIT, || {
        state_is(&w, &csi_in_registry, "retrying")
    });
    let s = w.socket(&csi_in_registry).unwrap();
    assert!(
        s["lastError"].as_str().unwrap().contains("Unimplemented"),
        "{s:#}"
    );
    assert!(w.listed().is_empty());

    // Every failure is retried with backoff (upstream's reconciler retries every failed
    // registration), and each is logged once however often it is retried.
    for (server, _) in &servers {
        wait_for("a second attempt", WAIT, || server.get_info_calls() >= 2);
        let name = server.socket.display().to_string();
        let n = logs
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&name) && l.contains("retrying with backoff"))
            .count();
        let all: Vec<String> = logs
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&name))
            .cloned()
            .collect();
        assert_eq!(n, 1, "{name} logged {n} times: {all:#?}");
    }
    wait_for("silent socket retried", WAIT, || {
        w.socket(&silent_path)
            .is_some_and(|s| s["state"] == "retrying" && s["attempts"].as_u64().unwrap() >= 3)
    });
    let silent = silent_path.display().to_string();
    let n = logs
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(&silent) && l.contains("retrying with backoff"))
        .count();
    assert_eq!(n, 1, "{silent} logged {n} times");
    println!("silent: {:#}", w.socket(&silent_path).unwrap());
    assert!(w.listed().is_empty());
    let status = status_json(&w.host);
    assert_eq!(
        status["pluginWatcher"]["sockets"].as_array().unwrap().len(),
        8,
        "{status:#}"
    );
    drop(csi);
}

#[test]
fn non_socket_files_and_hidden_names_are_ignored_and_a_symlinked_socket_is_registered_at_the_link()
{
    let w = Watched::new("node-ignore");
    let reg = w.registry();
    let outside = short_tempdir("kcsi-out");
    let server = in_runtime(|| {
        FaultyRegistrationServer::start(
            &outside.path().join("out.sock"),
            Answer::Info(plugin_info("CSIPlugin", "out.csi.k8s.io", "", &["1.0.0"])),
        )
    });
    std::os::unix::fs::symlink(&server.socket, reg.join("link-reg.sock")).unwrap();
    std::fs::write(reg.join("file-reg.sock"), b"not a socket").unwrap();
    let hidden = in_runtime(|| {
        FaultyRegistrationServer::start(
            &reg.join(".hidden-reg.sock"),
            Answer::Info(plugin_info(
                "CSIPlugin",
                "hidden.csi.k8s.io",
                "",
                &["1.0.0"],
            )),
        )
    });
    // A socket in a subdirectory is watched, as upstream.
    std::fs::create_dir(reg.join("sub")).unwrap();
    let nested = in_runtime(|| {
        FaultyRegistrationServer::start(
            &reg.join("sub/nested-reg.sock"),
            Answer::Info(plugin_info("DRAPlugin", "nested", "", &["1.0.0"])),
        )
    });
    wait_for("nested socket seen", WAIT, || {
        state_is(&w, &nested.socket, "retrying")
    });
    // Upstream's IsUnixDomainSocket follows the link: the socket behind it is asked.
    let link = reg.join("link-reg.sock");
    wait_for("symlinked socket asked", WAIT, || {
        server.get_info_calls() >= 1
    });
    assert!(w.socket(&link).is_some(), "{:#}", status_json(&w.host));
    let status = status_json(&w.host);
    assert_eq!(status["pluginWatcher"]["socketsSeen"], 2, "{status:#}");
    assert_eq!(hidden.get_info_calls(), 0);
}

#[test]
fn host_free_stops_the_watcher() {
    use kcsi::ffi::error::{kcsi_error, kcsi_string_free};
    use kcsi::ffi::host::{kcsi_host, kcsi_host_free, kcsi_host_new, kcsi_host_status};
    let root = short_tempdir("kcsi-w");
    let config = CString::new(
        json!({"nodeName": "node-free", "rootDir": root.path(), "pluginWatcher": true}).to_string(),
    )
    .unwrap();
    let mut h: *mut kcsi_host = ptr::null_mut();
    let mut err: *mut kcsi_error = ptr::null_mut();
    assert_eq!(kcsi_host_new(config.as_ptr(), &mut h, &mut err), 0);
    let registry = root.path().join("plugins_registry");
    let first = in_runtime(|| {
        FaultyRegistrationServer::start(
            &registry.join("a-reg.sock"),
            Answer::Info(plugin_info("DRAPlugin", "a", "", &["1.0.0"])),
        )
    });
    let status = || -> Value {
        let mut out: *mut std::ffi::c_char = ptr::null_mut();
        let mut err: *mut kcsi_error = ptr::null_mut();
        assert_eq!(kcsi_host_status(h, &mut out, &mut err), 0);
        let v = serde_json::from_str(unsafe { CStr::from_ptr(out) }.to_str().unwrap()).unwrap();
        kcsi_string_free(out);
        v
    };
    wait_for("first socket refused", WAIT, || {
        status()["pluginWatcher"]["sockets"][0]["state"] == "retrying"
    });
    assert!(!first.statuses().is_empty());

    kcsi_host_free(h);
    let second = in_runtime(|| {
        FaultyRegistrationServer::start(
            &registry.join("b-reg.sock"),
            Answer::Info(plugin_info("DRAPlugin", "b", "", &["1.0.0"])),
        )
    });
    // A negative check needs some time: a running watcher answers within milliseconds.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(second.get_info_calls(), 0);
}

#[test]
fn failed_registration_is_retried_with_backoff_until_the_driver_answers() {
    let w = Watched::new("node-late");
    let endpoint = driver_socket(w.root(), "late.csi.k8s.io");
    // A registration server that, unlike node-driver-registrar, stays up after hearing
    // `false`, announcing a driver that is not running yet.
    let server = in_runtime(|| {
        FaultyRegistrationServer::start(
            &w.registry().join("late-reg.sock"),
            Answer::Info(plugin_info(
                "CSIPlugin",
                "late.csi.k8s.io",
                endpoint.to_str().unwrap(),
                &["1.0.0"],
            )),
        )
    });
    wait_for("first failure", WAIT, || {
        state_is(&w, &server.socket, "retrying")
    });
    let s = w.socket(&server.socket).unwrap();
    assert!(
        s["lastError"]
            .as_str()
            .unwrap()
            .contains("plugin registration failed with err"),
        "{s:#}"
    );
    let first = server.statuses();
    assert!(
        !first[0].plugin_registered && first[0].error.contains("NodeGetInfo"),
        "{first:?}"
    );

    let _driver = Hostpath::start(w.root(), "late.csi.k8s.io", "node-late");
    wait_for("registered on a retry", WAIT, || {
        state_is(&w, &server.socket, "registered")
    });
    assert_eq!(w.listed(), ["late.csi.k8s.io"]);
    let s = w.socket(&server.socket).unwrap();
    assert!(s["attempts"].as_u64().unwrap() >= 2, "{s:#}");
    let statuses = server.statuses();
    assert!(statuses.last().unwrap().plugin_registered, "{statuses:?}");
    assert!(statuses[..statuses.len() - 1]
        .iter()
        .all(|s| !s.plugin_registered));
}
