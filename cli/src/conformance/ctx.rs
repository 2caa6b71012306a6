//! One case's kubelet: its own root, its own fault proxy in front of the driver, a kcsi host
//! registered at that proxy, and the volumes it made, attached, staged and published, so
//! that clean-up undoes exactly those whatever the case did.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kcsi::proto::csi;
use kcsi::registration;
use kcsi::{HostConfig, NodeAgent};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use super::case::{fail, End, Failure};
use super::facts::Facts;
use super::owned::OwnedDriver;
use super::upstream;
use crate::args::VolumeArgs;
use crate::driver::{self, NewVolume};
use crate::fault_proxy::{Event, Fault, FaultProxy};
use crate::kubelet;
use crate::node::{self, Volume};

/// The versions node-driver-registrar reports for every driver.
pub const REGISTRAR_VERSIONS: &[&str] = &["1.0.0"];

/// What a case asks for a volume.
#[derive(Clone)]
pub struct VolumeWish {
    pub block: bool,
    pub access_mode: &'static str,
    pub read_only: bool,
    pub mount_options: Vec<String>,
    pub bytes: i64,
    /// Attach it (when the driver has PUBLISH_UNPUBLISH_VOLUME).
    pub attach: bool,
    /// The pod's fsGroup.
    pub fs_group: Option<i64>,
    /// The pod's SELinux file label, which the volume manager mounts the volume with.
    pub se_linux_label: Option<String>,
    /// Send [`SECRETS`] as the PV's stage, publish and controller publish secrets.
    pub secrets: bool,
}

/// The secrets a volume with [`VolumeWish::secrets`] sends: (the call, key, value), by the
/// secrets file's (csi-sanity's) key for the call.
pub const SECRETS: &[(&str, &str, &str)] = &[
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

fn secret_of(call: &str) -> HashMap<String, String> {
    SECRETS
        .iter()
        .filter(|s| s.0 == call)
        .map(|s| (s.1.to_string(), s.2.to_string()))
        .collect()
}

impl Default for VolumeWish {
    fn default() -> VolumeWish {
        VolumeWish {
            block: false,
            access_mode: "ReadWriteOnce",
            read_only: false,
            mount_options: Vec::new(),
            bytes: 10 << 20,
            attach: true,
            fs_group: None,
            se_linux_label: None,
            secrets: false,
        }
    }
}

/// A volume a case set up, and how far.
struct Placed {
    v: Volume,
    staged: bool,
    published: bool,
}

pub struct Ctx {
    pub facts: Arc<Facts>,
    /// Mount options the driver says it honours (`--mount-option`).
    pub mount_options: Vec<String>,
    /// The driver's CSIDriver sets seLinuxMount: true (`--selinux-mount`).
    pub selinux_mount: bool,
    /// The driver's process, when the suite runs it (`--driver-command`).
    pub driver: Option<Arc<OwnedDriver>>,
    /// The deadline of each CSI call.
    pub timeout: Duration,
    pub root: PathBuf,
    pub node_name: String,
    /// Through this case's fault proxy.
    pub channel: Channel,
    /// Straight at the driver: clean-up must not meet the case's faults.
    direct: Channel,
    socket: PathBuf,
    proxy_socket: PathBuf,
    proxy: JoinHandle<()>,
    /// (method, request text) of each call through the proxy, as the runner gets them too.
    requests: Arc<Mutex<Vec<(String, String)>>>,
    agent: Option<NodeAgent>,
    csidriver: Value,
    created: Vec<String>,
    attached: Vec<String>,
    placed: Vec<Placed>,
    case: &'static str,
    _dir: tempfile::TempDir,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.proxy.abort();
    }
}

impl Ctx {
    /// A fresh root and a proxy in front of `socket` with `faults`; its calls are reported on
    /// `events`.
    pub fn new(
        facts: Arc<Facts>,
        case: &'static str,
        socket: &Path,
        faults: Vec<Fault>,
        timeout: Duration,
        events: mpsc::UnboundedSender<Event>,
    ) -> Result<Ctx, String> {
        let dir = tempfile::Builder::new()
            .prefix("kcsi-conformance-")
            .tempdir()
            .map_err(|e| {
                format!(
                    "cannot make a temp dir in {}: {e}",
                    std::env::temp_dir().display()
                )
            })?;
        let root = dir.path().join("root");
        std::fs::create_dir(&root).map_err(|e| format!("cannot make {}: {e}", root.display()))?;
        let proxy_socket = dir.path().join("csi.sock");
        let (tap, mut tapped) = mpsc::unbounded_channel();
        let proxy = FaultProxy::bind(&proxy_socket, socket, faults, false, Some(tap))
            .map_err(|e| format!("cannot listen on {}: {e}", proxy_socket.display()))?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        // Ends once the proxy and its connections, which hold the sender, are gone.
        tokio::spawn(async move {
            while let Some(e) = tapped.recv().await {
                if let Event::Request { method, text } = &e {
                    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                    seen.push((method.clone(), text.clone()));
                }
                let _ = events.send(e);
            }
        });
        let csidriver = json!({
            "metadata": {"name": facts.driver},
            "spec": {"attachRequired": facts.publish_unpublish},
        });
        Ok(Ctx {
            mount_options: Vec::new(),
            selinux_mount: false,
            driver: None,
            timeout,
            root,
            node_name: node::node_name(&None),
            channel: driver::channel(&proxy_socket),
            direct: driver::channel(socket),
            socket: socket.to_path_buf(),
            proxy: tokio::spawn(proxy.run()),
            proxy_socket,
            requests,
            agent: None,
            csidriver,
            created: Vec::new(),
            attached: Vec::new(),
            placed: Vec::new(),
            case,
            facts,
            _dir: dir,
        })
    }

    /// Changes the CSIDriver stand-in (`spec` fields merged in); before the host starts.
    pub fn csidriver(&mut self, spec: Value) {
        if let (Some(have), Value::Object(add)) = (self.csidriver["spec"].as_object_mut(), spec) {
            have.extend(add);
        }
    }

    /// The kubelet side, started and with the driver registered (RegisterPlugin: NodeGetInfo).
    pub async fn ready(&mut self) -> Result<&NodeAgent, End> {
        if self.agent.is_none() {
            let agent = self.start_host()?;
            self.register(&agent).await?;
            self.agent = Some(agent);
        }
        self.agent
            .as_ref()
            .ok_or_else(|| End::Skip("no host".into()))
    }

    /// A kcsi host on this case's root, with the CSIDriver stand-in and the volume health
    /// gate on (so the driver's volume condition is read, as with CSIVolumeHealth).
    pub fn start_host(&self) -> Result<NodeAgent, End> {
        let fail = |what: String| {
            End::Fail(Failure {
                what: format!("kcsi cannot start its host: {what}"),
                breaks: upstream::REGISTER,
                unanswered: false,
            })
        };
        let csidriver = serde_json::from_value(self.csidriver.clone())
            .map_err(|e| fail(format!("the CSIDriver stand-in is not valid: {e}")))?;
        NodeAgent::new(HostConfig {
            timeout: self.timeout,
            csi_drivers: vec![csidriver],
            feature_gates: [("CSIVolumeHealth".to_string(), true)].into(),
            ..HostConfig::node(self.node_name.clone(), self.root.clone())
        })
        .map_err(|e| fail(e.message().to_string()))
    }
    /// RegisterPlugin of the driver at this case's proxy: its node info.
    pub async fn register(&self, agent: &NodeAgent) -> Result<kcsi::NodeInfo, End> {
        let versions: Vec<String> = REGISTRAR_VERSIONS.iter().map(|v| v.to_string()).collect();
        registration::register(
            agent,
            &self.facts.driver,
            &self.proxy_endpoint(),
            &versions,
            None,
        )
        .await
        .map_err(fail(upstream::REGISTER))
    }

    /// A kubelet restart: the host goes, a new one starts from what is on disk and the
    /// driver registers with it again.
    pub async fn restart(&mut self) -> Result<kcsi::NodeInfo, End> {
        self.agent = None;
        let agent = self.start_host()?;
        let info = self.register(&agent).await;
        self.agent = Some(agent);
        info
    }

    /// The driver process the suite runs, or the skip of a case that must restart it.
    pub fn owned_driver(&self) -> Result<Arc<OwnedDriver>, End> {
        self.driver.clone().ok_or_else(|| {
            End::Skip(
                "the suite does not run the driver, so cannot restart it after killing it \
                 (give --driver-command)"
                    .into(),
            )
        })
    }

    /// Starts the killed driver again, as its DaemonSet would; the channels dial it afresh.
    pub async fn restart_driver(&mut self, breaks: &'static str) -> Result<(), End> {
        self.owned_driver()?.restart().await.map_err(|what| {
            End::Fail(Failure {
                what: format!("cannot restart the killed driver: {what}"),
                breaks,
                unanswered: false,
            })
        })?;
        self.channel = driver::channel(&self.proxy_socket);
        self.direct = driver::channel(&self.socket);
        Ok(())
    }

    pub fn agent(&self) -> Result<&NodeAgent, End> {
        self.agent
            .as_ref()
            .ok_or_else(|| End::Skip("the host is not started".into()))
    }

    /// A volume as the external-provisioner makes it (CreateVolume) and, when the driver has
    /// PUBLISH_UNPUBLISH_VOLUME, attaches it (ControllerPublishVolume to NodeGetInfo's node ID).
    pub async fn volume(&mut self, w: &VolumeWish) -> Result<Volume, End> {
        if !self.facts.create_delete {
            return Err(End::Skip(
                "the driver has no Controller CREATE_DELETE_VOLUME (the suite makes its volumes \
                 with CreateVolume)"
                    .into(),
            ));
        }
        let mode = kcsi::access_mode(w.access_mode, &self.facts.node);
        let request = NewVolume {
            name: format!(
                "kcsi-conformance-{}-{}-{}",
                std::process::id(),
                self.case.replace('.', "-"),
                self.created.len()
            ),
            bytes: w.bytes,
            block: w.block,
            fs_type: "",
            mount_flags: Vec::new(),
            access_mode: mode,
            parameters: Default::default(),
            secrets: Default::default(),
            topology: None,
        };
        let created = match driver::create_volume(&self.channel, request, self.timeout).await {
            Ok(v) => v,
            Err(e) if refusal(&e) => {
                return Err(End::Skip(format!(
                    "the controller does not offer a {} {} volume ({:?}): {}",
                    w.access_mode,
                    if w.block { "block" } else { "filesystem" },
                    mode,
                    e.message()
                )))
            }
            Err(e) => return Err(fail(upstream::PROVISION)(e)),
        };
        self.created.push(created.volume_id.clone());
        let mut publish_context = Vec::new();
        if self.facts.publish_unpublish && w.attach {
            let node_id = self.facts.node_id.clone();
            self.attached.push(created.volume_id.clone());
            let context = driver::controller_publish(
                &self.channel,
                driver::Publish {
                    volume_id: &created.volume_id,
                    node_id: &node_id,
                    block: w.block,
                    fs_type: "",
                    mount_flags: Vec::new(),
                    access_mode: mode,
                    read_only: w.read_only,
                    volume_context: Default::default(),
                    secrets: if w.secrets {
                        secret_of("ControllerPublishVolume")
                    } else {
                        Default::default()
                    },
                },
                self.timeout,
            )
            .await
            .map_err(fail(upstream::ATTACH))?;
            publish_context.extend(context);
        }
        let n = self.placed.len();
        let secrets = if w.secrets {
            Some(self.secrets_file()?)
        } else {
            None
        };
        let args = VolumeArgs {
            name: Some(format!("pv-{n}")),
            block: w.block,
            fs_type: None,
            mount_options: w.mount_options.clone(),
            read_only: w.read_only,
            fs_group: w.fs_group,
            access_mode: w.access_mode.to_string(),
            attributes: Vec::new(),
            publish_context,
            secrets,
            pod_uid: format!("kcsi-conformance-pod-{n}"),
        };
        let attributes = created.volume_context.into_iter().collect();
        let mut v = node::volume(
            &self.facts.driver,
            &created.volume_id,
            &args,
            &attributes,
            self.facts.publish_unpublish,
        )
        .map_err(|e| {
            End::Fail(Failure {
                what: e.0,
                breaks: upstream::PROVISION,
                unanswered: false,
            })
        })?;
        v.se_linux_label = w.se_linux_label.clone();
        self.placed.push(Placed {
            v: v.clone(),
            staged: false,
            published: false,
        });
        Ok(v)
    }

    /// [`SECRETS`]' node secrets as a secrets file in the case's dir, as kcsi reads them.
    fn secrets_file(&self) -> Result<PathBuf, End> {
        let file = self._dir.path().join("secrets.json");
        let text = json!({
            "NodeStageVolumeSecret": secret_of("NodeStageVolume"),
            "NodePublishVolumeSecret": secret_of("NodePublishVolume"),
        });
        std::fs::write(&file, text.to_string()).map_err(|e| {
            End::Fail(Failure {
                what: format!("cannot write {}: {e}", file.display()),
                breaks: "nothing of the driver's: the suite could not set up the case",
                unanswered: false,
            })
        })?;
        Ok(file)
    }

    /// The text of each request this case's proxy has seen for `method`, oldest first.
    pub fn requests(&self, method: &str) -> Vec<String> {
        let seen = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter()
            .filter(|(m, _)| m == method)
            .map(|(_, text)| text.clone())
            .collect()
    }

    fn placed(&mut self, v: &Volume) -> Option<&mut Placed> {
        self.placed
            .iter_mut()
            .find(|p| p.v.spec_name == v.spec_name)
    }

    /// MountDevice / SetUpDevice (after WaitForAttach when attach is required): NodeStageVolume.
    pub async fn stage(&mut self, v: &Volume) -> Result<(), End> {
        if let Some(p) = self.placed(v) {
            p.staged = true;
        }
        self.ready().await?;
        let host = self.agent()?;
        if self.facts.publish_unpublish {
            kcsi::attacher::wait_for_attach(host, &v.spec, self.timeout)
                .await
                .map_err(fail(upstream::ATTACH))?;
        }
        let breaks = if v.block {
            upstream::SET_UP_DEVICE
        } else {
            upstream::MOUNT_DEVICE
        };
        kubelet::stage(host, v)
            .await
            .map(drop)
            .map_err(fail(breaks))
    }

    /// SetUp / MapPodDevice: NodePublishVolume; the path the pod uses.
    pub async fn publish(&mut self, v: &Volume) -> Result<PathBuf, End> {
        if let Some(p) = self.placed(v) {
            p.published = true;
        }
        let breaks = if v.block {
            upstream::MAP_POD_DEVICE
        } else {
            upstream::SET_UP
        };
        kubelet::publish(self.agent()?, v)
            .await
            .map_err(fail(breaks))
    }

    pub async fn unpublish(&mut self, v: &Volume) -> Result<(), End> {
        let breaks = if v.block {
            upstream::UNMAP_POD_DEVICE
        } else {
            upstream::TEAR_DOWN
        };
        kubelet::unpublish(self.agent()?, v.block, &v.spec_name, &v.pod_uid)
            .await
            .map_err(fail(breaks))?;
        if let Some(p) = self.placed(v) {
            p.published = false;
        }
        Ok(())
    }

    pub async fn unstage(&mut self, v: &Volume) -> Result<(), End> {
        let breaks = if v.block {
            upstream::TEAR_DOWN_DEVICE
        } else {
            upstream::UNMOUNT_DEVICE
        };
        kubelet::unstage(self.agent()?, v.block, &v.driver, &v.handle, &v.spec_name)
            .await
            .map_err(fail(breaks))?;
        if let Some(p) = self.placed(v) {
            p.staged = false;
        }
        Ok(())
    }

    /// Forgets that `v` is staged and published: the case unpublished and unstaged it itself.
    pub fn torn_down(&mut self, v: &Volume) {
        if let Some(p) = self.placed(v) {
            p.staged = false;
            p.published = false;
        }
    }

    /// Stage then publish: the pod's path.
    pub async fn set_up(&mut self, v: &Volume) -> Result<PathBuf, End> {
        self.stage(v).await?;
        self.publish(v).await
    }

    /// Unpublish then unstage, then nothing may stay mounted under the root.
    pub async fn tear_down(&mut self, v: &Volume) -> Result<(), End> {
        self.unpublish(v).await?;
        self.unstage(v).await?;
        self.nothing_mounted(upstream::UNMOUNT_DEVICE)
    }

    /// Fails when something is still mounted under this case's root.
    pub fn nothing_mounted(&self, breaks: &'static str) -> Result<(), End> {
        let left = kcsi::mounts_below(&self.root).unwrap_or_default();
        if left.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
        Err(End::Fail(Failure {
            what: format!(
                "the driver answered OK to every unpublish and unstage, but left mounted: {}",
                list.join(", ")
            ),
            breaks,
            unanswered: false,
        }))
    }

    /// Undoes what the case set up, newest first, each step tried whatever the last did;
    /// what the driver left mounted is unmounted here. Returns what had to be unmounted.
    pub async fn clean_up(&mut self) -> Vec<String> {
        let placed = std::mem::take(&mut self.placed);
        if let Some(host) = self.agent.as_ref() {
            for p in placed.iter().rev() {
                if p.published {
                    let _ = kubelet::unpublish(host, p.v.block, &p.v.spec_name, &p.v.pod_uid).await;
                }
                if p.staged {
                    let _ =
                        kubelet::unstage(host, p.v.block, &p.v.driver, &p.v.handle, &p.v.spec_name)
                            .await;
                }
            }
        }
        let left = unmount_below(&self.root);
        for id in self.attached.drain(..).rev() {
            let _ = driver::controller_unpublish(
                &self.direct,
                &id,
                &self.facts.node_id,
                Default::default(),
                self.timeout,
            )
            .await;
        }
        for id in self.created.drain(..).rev() {
            let _ =
                driver::delete_volume(&self.direct, &id, Default::default(), self.timeout).await;
        }
        if let Some(agent) = self.agent.take() {
            let _ = registration::deregister(&agent, &self.facts.driver).await;
        }
        left
    }

    /// Detaches `id` at clean-up: the case attaches it itself.
    pub fn attached(&mut self, id: &str) {
        self.attached.push(id.to_string());
    }

    /// Forgets `id` for clean-up: the case detached it itself.
    pub fn forget_attached(&mut self, id: &str) {
        self.attached.retain(|a| a != id);
    }

    /// The endpoint the driver is registered at: this case's proxy.
    pub fn proxy_endpoint(&self) -> String {
        self.proxy_socket.display().to_string()
    }
}

/// An answer that means "not this kind of volume" rather than a broken driver.
fn refusal(e: &kcsi::Error) -> bool {
    use tonic::Code;
    matches!(
        e.grpc_code().map(Code::from_i32),
        Some(Code::InvalidArgument | Code::Unimplemented | Code::OutOfRange)
    )
}

/// Everything mounted under `root`, detached (deepest first, as mounts_below lists them).
fn unmount_below(root: &Path) -> Vec<String> {
    let left = kcsi::mounts_below(root).unwrap_or_default();
    for p in &left {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default();
        // SAFETY: umount2 on a NUL-terminated path we own.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
    left.iter().map(|p| p.display().to_string()).collect()
}

/// The CSI mode kcsi sends for a Kubernetes access mode on this driver.
pub fn csi_mode(facts: &Facts, k8s: &str) -> csi::volume_capability::access_mode::Mode {
    kcsi::access_mode(k8s, &facts.node)
}
