//! Test harness: starts real peer programs (built by scripts/peers/build.sh) and stops them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const DRIVER: &str = "hostpath.csi.k8s.io";

/// The repository root (these helpers are shared by the workspace's crates).
fn repo() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|d| d.join("scripts/peers/path.sh").exists())
        .unwrap_or(&manifest)
        .to_path_buf()
}

/// Path of a built peer binary; panics with the build command when it is missing.
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

pub fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running CSI driver process on its own socket and state dir.
pub struct DriverProcess {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub name: String,
    child: Option<Child>,
    program: PathBuf,
    args: Vec<String>,
}

impl DriverProcess {
    /// The stand-in hostpath driver (real mounts), see scripts/peers/standin-hostpath.
    pub fn hostpath(node_id: &str, extra: &[&str]) -> DriverProcess {
        let dir = short_tempdir("kcsi-drv");
        let socket = dir.path().join("csi.sock");
        let state = dir.path().join("state");
        let mut args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            format!("--nodeid={node_id}"),
            format!("--statedir={}", state.display()),
            format!("--drivername={DRIVER}"),
            "-v=5".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(peer_binary("standin"), args, dir, socket, DRIVER)
    }

    /// The real csi-driver-host-path (`hostpathplugin`): Identity, Controller and Node.
    pub fn hostpathplugin(node_id: &str) -> DriverProcess {
        let dir = short_tempdir("kcsi-hp");
        let socket = dir.path().join("csi.sock");
        let args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            format!("--nodeid={node_id}"),
            format!("--statedir={}", dir.path().join("state").display()),
            format!("--drivername={DRIVER}"),
            "-v=5".to_string(),
        ];
        Self::spawn(peer_binary("hostpath"), args, dir, socket, DRIVER)
    }

    /// Kubernetes' e2e mock CSI driver (no mounts; node id = driver name).
    pub fn mock(name: &str, extra: &[&str]) -> DriverProcess {
        let dir = short_tempdir("kcsi-mock");
        let socket = dir.path().join("csi.sock");
        let mut args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            format!("--drivername={name}"),
            "-v=3".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(peer_binary("mockdriver"), args, dir, socket, name)
    }

    fn spawn(
        program: PathBuf,
        args: Vec<String>,
        dir: tempfile::TempDir,
        socket: PathBuf,
        name: &str,
    ) -> DriverProcess {
        let mut p = DriverProcess {
            dir,
            socket,
            name: name.to_string(),
            child: None,
            program,
            args,
        };
        p.start();
        p
    }

    pub fn endpoint(&self) -> String {
        self.socket.display().to_string()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("driver.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// (Re)starts the process on the same socket and state.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.program.display()));
        self.child = Some(child);
        let socket = self.socket.clone();
        // Ready when a connect succeeds: the socket file appears at bind(), before listen().
        wait_for("driver socket", Duration::from_secs(20), || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
    }

    /// SIGKILL, as a crashing driver.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    pub fn restart(&mut self) {
        self.kill();
        self.start();
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        unmount_below(self.dir.path());
        detach_loops_below(self.dir.path());
    }
}

/// Detaches the loop devices backed by files at or below `dir` (a driver's block volumes that
/// were never deleted).
pub fn detach_loops_below(dir: &Path) {
    let Ok(out) = Command::new("losetup")
        .args(["--list", "--noheadings", "--output", "NAME,BACK-FILE"])
        .output()
    else {
        return;
    };
    let prefix = format!("{}/", dir.display());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((dev, file)) = line.trim().split_once(char::is_whitespace) {
            if file.trim().starts_with(&prefix) {
                let _ = Command::new("losetup").arg("-d").arg(dev).status();
            }
        }
    }
}

/// Unmounts everything mounted at or below `dir`, deepest first, so no test leaves a mount.
pub fn unmount_below(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = dir.display().to_string();
    let mut targets: Vec<String> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|t| t == &prefix || t.starts_with(&format!("{prefix}/")))
        .collect();
    targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
    for t in targets {
        let _ = Command::new("umount").arg("-l").arg(&t).status();
    }
}

/// A standalone kcsi host rooted in its own temp dir.
pub fn host_config(root: &Path, node: &str) -> String {
    serde_json::json!({"nodeName": node, "rootDir": root}).to_string()
}

/// A real kube-apiserver on etcd (scripts/peers/apiserver.sh), one per test binary: started on
/// first use, stopped when the test process exits. Tests sharing it use unique node names.
pub struct ApiServer {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
}

static API_SERVER: std::sync::OnceLock<ApiServer> = std::sync::OnceLock::new();

extern "C" fn stop_api_server_at_exit() {
    if let Some(api) = API_SERVER.get() {
        let _ = api.script("stop");
        let _ = std::fs::remove_dir_all(&api.dir);
    }
}

impl ApiServer {
    pub fn shared() -> &'static ApiServer {
        API_SERVER.get_or_init(|| {
            let dir = short_tempdir("kcsi-api").keep();
            let api = ApiServer {
                kubeconfig: dir.join("kubeconfig"),
                dir,
            };
            // libtest ends with exit(), which runs atexit handlers, also after failed tests.
            unsafe { libc::atexit(stop_api_server_at_exit) };
            // A watchdog stops it too if this process dies without running atexit (SIGKILL).
            let watchdog = format!(
                "while kill -0 {pid} 2>/dev/null; do sleep 1; done; bash {script} stop {dir} >/dev/null 2>&1; rm -rf {dir}",
                pid = std::process::id(),
                script = repo().join("scripts/peers/apiserver.sh").display(),
                dir = api.dir.display()
            );
            // Started in the background by a shell that exits at once, so it is not our child.
            Command::new("bash")
                .args(["-c", &format!("setsid bash -c '{watchdog}' </dev/null >/dev/null 2>&1 &")])
                .status()
                .expect("start the API server watchdog");
            let out = api.script("start");
            assert!(
                out.status.success(),
                "apiserver.sh start failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            api
        })
    }

    fn script(&self, cmd: &str) -> std::process::Output {
        Command::new("bash")
            .arg(repo().join("scripts/peers/apiserver.sh"))
            .arg(cmd)
            .arg(&self.dir)
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/peers/apiserver.sh")
    }

    /// Stops only kube-apiserver (etcd and the port stay), as an outage.
    pub fn stop_apiserver(&self) {
        let out = self.script("stop-apiserver");
        assert!(
            out.status.success(),
            "stop-apiserver: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn start_apiserver(&self) {
        let out = self.script("start-apiserver");
        assert!(
            out.status.success(),
            "start-apiserver: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A kcsi host config for `node` using this API server.
    pub fn host_config(&self, root: &Path, node: &str) -> String {
        serde_json::json!({"nodeName": node, "rootDir": root, "kubeconfig": self.kubeconfig})
            .to_string()
    }
}
