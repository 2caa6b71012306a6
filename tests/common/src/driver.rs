//! CSI driver processes for the tests: the real csi-driver-host-path (`hostpathplugin`), the
//! e2e mock driver, and csi-fault-driver for the tests that inject a fault; their call logs;
//! and the CO-side RPCs a test makes itself (CreateVolume, NodeStage) on their sockets.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kcsi::proto::csi;
use serde_json::Value;

use crate::{detach_loops_below, peer_binary, short_tempdir, unmount_below, wait_for, DRIVER};

/// A running CSI driver process on its own socket and state dir. Dropping it stops the
/// process and removes every mount and loop device below its dir.
pub struct DriverProcess {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub name: String,
    child: Option<Child>,
    program: PathBuf,
    args: Vec<String>,
}

impl DriverProcess {
    /// The real csi-driver-host-path v1.18 (real bind mounts and loop devices), serving
    /// [`DRIVER`] for node `node_id`. Volumes must be created first ([`Self::create_volume`]).
    pub fn hostpath(node_id: &str, extra: &[&str]) -> DriverProcess {
        Self::hostpath_like("hostpath", DRIVER, node_id, extra)
    }

    /// The real hostpath driver serving the driver name `name`.
    pub fn hostpath_named(name: &str, node_id: &str, extra: &[&str]) -> DriverProcess {
        Self::hostpath_like("hostpath", name, node_id, extra)
    }

    /// csi-fault-driver (scripts/peers/fault-driver): hostpath-like, plus `--fail-rpc`,
    /// `--hang-rpc` and `--disable-node-cap`. Only for tests that inject a fault.
    pub fn faulty(node_id: &str, extra: &[&str]) -> DriverProcess {
        Self::hostpath_like("faultdriver", DRIVER, node_id, extra)
    }

    /// The fault driver without STAGE_UNSTAGE_VOLUME, so a fault test needs no NodeStage.
    pub fn faulty_unstaged(node_id: &str, extra: &[&str]) -> DriverProcess {
        let mut all = vec!["--disable-node-cap=STAGE_UNSTAGE_VOLUME"];
        all.extend_from_slice(extra);
        Self::faulty(node_id, &all)
    }

    fn hostpath_like(peer: &str, name: &str, node_id: &str, extra: &[&str]) -> DriverProcess {
        let dir = short_tempdir("kcsi-drv");
        let socket = dir.path().join("csi.sock");
        let state = dir.path().join("state");
        let mut args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            format!("--nodeid={node_id}"),
            format!("--statedir={}", state.display()),
            format!("--drivername={name}"),
            "-v=5".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn(peer_binary(peer), args, dir, socket, name)
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

    /// Where a hostpath-like driver keeps volume `id` (a directory, or a file for block).
    pub fn volume_path(&self, id: &str) -> PathBuf {
        self.dir.path().join("state").join(id)
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

    /// The shell command that starts this driver as [`Self::start`] does, its output appended
    /// to its log: for a caller that runs (and restarts) the driver itself.
    pub fn shell_command(&self) -> String {
        let quote = |w: &str| format!("'{}'", w.replace('\'', r"'\''"));
        let mut words = vec![quote(&self.program.display().to_string())];
        words.extend(self.args.iter().map(|a| quote(a)));
        format!(
            "exec {} >>{} 2>&1",
            words.join(" "),
            quote(&self.log_path().display().to_string())
        )
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

    /// Restarts the process with `--flag=value` replacing the same flag given before.
    pub fn restart_with(&mut self, flag_value: &str) {
        let flag = flag_value.split('=').next().unwrap().to_string();
        self.args
            .retain(|a| a.split('=').next() != Some(flag.as_str()));
        self.args.push(flag_value.to_string());
        self.restart();
    }

    /// Every call the driver logged for `method` (short name, e.g. `NodePublishVolume`),
    /// oldest first, as hostpathplugin (pkg/hostpath/server.go logGRPCJson), the mock and
    /// the fault driver log them: `gRPCCall: {"Method", "Request", "Response", "Error"}`,
    /// the messages as Go's encoding/json renders them (proto field names; a oneof as
    /// `{"AccessType": {"Mount": {...}}}`; enums as numbers; secrets in clear). `Error` is ""
    /// on success.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        let suffix = format!("/{method}");
        self.log()
            .lines()
            .filter_map(|l| l.split_once("gRPCCall: "))
            .filter_map(|(_, json)| serde_json::from_str::<Value>(json).ok())
            .filter(|v| v["Method"].as_str().is_some_and(|m| m.ends_with(&suffix)))
            .collect()
    }

    /// The requests of [`Self::calls`].
    pub fn requests(&self, method: &str) -> Vec<Value> {
        self.calls(method)
            .into_iter()
            .map(|c| c["Request"].clone())
            .collect()
    }

    /// The last request logged for `method`; panics when there is none.
    pub fn last_request(&self, method: &str) -> Value {
        self.requests(method)
            .pop()
            .unwrap_or_else(|| panic!("no {method} in the driver log"))
    }

    /// Controller.CreateVolume of `size` bytes (0: the driver's default); returns the id.
    pub fn create_volume(&self, name: &str, block: bool, size: i64) -> String {
        let req = csi::CreateVolumeRequest {
            name: name.to_string(),
            capacity_range: (size > 0).then_some(csi::CapacityRange {
                required_bytes: size,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![capability(block)],
            ..Default::default()
        };
        self.rpc(|ch| async move {
            csi::controller_client::ControllerClient::new(ch)
                .create_volume(req)
                .await
                .expect("CreateVolume")
                .into_inner()
                .volume
                .unwrap()
                .volume_id
        })
    }

    /// Controller.DeleteVolume (detaches a block volume's loop device).
    pub fn delete_volume(&self, id: &str) {
        let req = csi::DeleteVolumeRequest {
            volume_id: id.to_string(),
            ..Default::default()
        };
        self.rpc(|ch| async move {
            csi::controller_client::ControllerClient::new(ch)
                .delete_volume(req)
                .await
                .expect("DeleteVolume");
        })
    }

    /// The driver's volumes from `<statedir>/state.json`.
    pub fn volumes(&self) -> Vec<Value> {
        let path = self.dir.path().join("state/state.json");
        // The driver rewrites its state file in place (truncate, then write), so a read can
        // meet it torn while a call the driver is finishing saves: read again until it parses.
        let deadline = Instant::now() + Duration::from_secs(5);
        let state: Value = loop {
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break Value::Null,
                Err(e) => panic!("cannot read {}: {e}", path.display()),
            };
            match serde_json::from_str(&text) {
                Ok(state) => break state,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("{} does not parse: {e}: {text:?}", path.display()),
            }
        };
        state["Volumes"].as_array().cloned().unwrap_or_default()
    }

    /// (staged at, published at) of volume `id`, as the driver records them.
    pub fn volume_paths(&self, id: &str) -> (Vec<String>, Vec<String>) {
        let list = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        self.volumes()
            .iter()
            .find(|v| v["VolID"] == id)
            .map(|v| (list(&v["Staged"]), list(&v["Published"])))
            .unwrap_or_default()
    }

    /// NodeStage of `id` at `staging` (the attacher's job, done directly by a test).
    pub fn stage(&self, id: &str, staging: &Path) {
        let req = csi::NodeStageVolumeRequest {
            volume_id: id.to_string(),
            staging_target_path: staging.display().to_string(),
            volume_capability: Some(capability(false)),
            ..Default::default()
        };
        self.rpc(|ch| async move {
            csi::node_client::NodeClient::new(ch)
                .node_stage_volume(req)
                .await
                .expect("NodeStageVolume");
        })
    }

    pub fn unstage(&self, id: &str, staging: &Path) {
        let req = csi::NodeUnstageVolumeRequest {
            volume_id: id.to_string(),
            staging_target_path: staging.display().to_string(),
        };
        self.rpc(|ch| async move {
            csi::node_client::NodeClient::new(ch)
                .node_unstage_volume(req)
                .await
                .expect("NodeUnstageVolume");
        })
    }

    /// The connections the driver holds open on its socket, by socket inode: accepted sockets
    /// carry the listener's path in /proc/net/unix, and a new connection has a new inode.
    pub fn connections(&self) -> Vec<u64> {
        let path = self.socket.display().to_string();
        std::fs::read_to_string("/proc/net/unix")
            .unwrap_or_default()
            .lines()
            .skip(1)
            .filter_map(|line| {
                // Num RefCount Protocol Flags Type St Inode Path; St 03 is connected.
                let f: Vec<&str> = line.split_whitespace().collect();
                (f.len() == 8 && f[7] == path && f[5] == "03").then(|| f[6].parse().ok())?
            })
            .collect()
    }

    /// Runs one client call on a fresh connection to the driver's socket.
    fn rpc<T, F: std::future::Future<Output = T>>(
        &self,
        call: impl FnOnce(tonic::transport::Channel) -> F,
    ) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async { call(channel(&self.socket).await).await })
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
        // hostpathplugin attaches a block volume's loop device at CreateVolume and keeps it.
        detach_loops_below(&self.dir.path().join("state"));
    }
}

/// A tonic channel over the Unix socket at `socket`.
pub async fn channel(socket: &Path) -> tonic::transport::Channel {
    let socket = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                tokio::net::UnixStream::connect(socket)
                    .await
                    .map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .expect("connect to the driver")
}

/// A single-node-writer capability, block or mount.
pub fn capability(block: bool) -> csi::VolumeCapability {
    use csi::volume_capability::{
        access_mode::Mode, AccessMode, AccessType, BlockVolume, MountVolume,
    };
    csi::VolumeCapability {
        access_type: Some(if block {
            AccessType::Block(BlockVolume {})
        } else {
            AccessType::Mount(MountVolume::default())
        }),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeWriter as i32,
        }),
    }
}

/// The mount part of a logged `volume_capability` (`{"AccessType": {"Mount": {...}}}`);
/// `Value::Null` when the capability is not a mount one.
pub fn mount_capability(request: &Value) -> &Value {
    &request["volume_capability"]["AccessType"]["Mount"]
}

/// The block part of a logged `volume_capability`; `Value::Null` when it is not a block one.
pub fn block_capability(request: &Value) -> &Value {
    &request["volume_capability"]["AccessType"]["Block"]
}
