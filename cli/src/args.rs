//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::fault_proxy::Fault;

#[derive(Parser)]
#[command(
    name = "kcsi",
    version,
    about = "Run the kubelet's CSI volume plugin against a CSI driver: no cluster needed",
    long_about = "Run the kubelet's CSI volume plugin (kcsi, upstream pkg/volume/csi) against a \
CSI driver: the same RPCs, paths, vol_data.json and error classes as the kubelet, no cluster needed.\n\n\
Exit status: 0 every step passed; 1 a step failed; 2 bad input (arguments, files, endpoint); \
130 interrupted (what was set up is cleaned up first)."
)]
pub struct Cli {
    /// Machine-readable output on stdout, nothing else: one JSON object ({"ok", "steps": [...]}
    /// for the driver commands), or one per line for each change with watch.
    #[arg(long, global = true)]
    pub json: bool,
    /// kcsi's log lines on stderr (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// The kubelet's whole sequence: register, attach wait, stage, publish, probe I/O, stats,
    /// a kubelet restart with reconstruction, unpublish, unstage, deregister.
    Lifecycle(LifecycleArgs),
    /// NodeStageVolume, as the kubelet's MountDevice / SetUpDevice (state kept under --root).
    Stage(VolumeCmd),
    /// NodePublishVolume, as the kubelet's SetUp / MapPodDevice.
    Publish(VolumeCmd),
    /// NodeUnpublishVolume of a volume published under --root (found from vol_data.json).
    Unpublish(PublishedCmd),
    /// NodeUnstageVolume of a volume staged under --root (found from vol_data.json).
    Unstage(PublishedCmd),
    /// NodeGetVolumeStats of a volume published under --root.
    Stats(PublishedCmd),
    /// NodeExpandVolume of a staged and published volume (after the controller grew it).
    Expand(ExpandCmd),
    /// Rebuild the specs of the volumes under --root from their vol_data.json, as a restarted
    /// kubelet does (no driver needed).
    Reconstruct(RootCmd),
    /// What is staged and published under --root, from vol_data.json.
    List(RootCmd),
    /// Run the plugin watcher as a tiny node agent: print each driver that registers (through
    /// its node-driver-registrar) or goes away, with its node info, until interrupted.
    Watch(WatchCmd),
    /// Serve the fault proxy alone in front of a driver, for other tests.
    FaultProxy(FaultProxyCmd),
    /// Serve a CSI driver to Podman and Docker as a volume plugin (the Docker volume plugin
    /// protocol on a Unix socket): create, mount per caller, unmount, remove, list.
    VolumePlugin(VolumePluginCmd),
    /// CreateVolume with the driver's Controller service, as the external-provisioner does;
    /// prints the new volume's id (for a volume the other commands then use).
    CreateVolume(CreateVolumeCmd),
    /// DeleteVolume with the driver's Controller service.
    DeleteVolume(DeleteVolumeCmd),
    /// The kubelet-in-a-box suite: every sequence the kubelet (and the external-provisioner
    /// and external-attacher) drives, each a named case that passes, fails or is skipped.
    Conformance(ConformanceArgs),
}

#[derive(Args, Clone)]
pub struct DriverArgs {
    /// The driver's CSI socket: unix:///path/csi.sock or /path/csi.sock.
    #[arg(long, value_name = "ENDPOINT")]
    pub endpoint: String,
    /// The driver's name; checked against GetPluginInfo (default: what GetPluginInfo says).
    #[arg(long, value_name = "NAME")]
    pub driver: Option<String>,
    /// The kubelet's node name (names VolumeAttachments; default: this host's name).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// Deadline of each step, in seconds (the kubelet's csiTimeout is 120).
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub timeout: f64,
    /// A CSIDriver object (JSON) standing in for the API server's (podInfoOnMount,
    /// fsGroupPolicy, attachRequired, ...).
    #[arg(long, value_name = "FILE")]
    pub csidriver: Option<PathBuf>,
    /// Inject a fault through the fault proxy: hang:RPC, kill:RPC, drop:RPC,
    /// error:RPC:CODE[:MESSAGE], delay:RPC:DURATION. Each fires on the first matching call
    /// (RPC@N: on the Nth).
    #[arg(long, value_name = "FAULT")]
    pub fault: Vec<Fault>,
}

#[derive(Args, Clone)]
pub struct VolumeArgs {
    /// The volume's name as a PV name (names its directories; default: derived from the handle).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A raw block volume (volumeMode: Block) instead of a filesystem.
    #[arg(long)]
    pub block: bool,
    #[arg(long, value_name = "TYPE")]
    pub fs_type: Option<String>,
    #[arg(long = "mount-option", value_name = "OPTION")]
    pub mount_options: Vec<String>,
    #[arg(long)]
    pub read_only: bool,
    /// The pod's fsGroup.
    #[arg(long, value_name = "GID")]
    pub fs_group: Option<i64>,
    /// Kubernetes access mode.
    #[arg(long, value_name = "MODE", default_value = "ReadWriteOnce")]
    pub access_mode: String,
    /// A volume attribute (the PV's volumeAttributes): key=value.
    #[arg(long = "attribute", value_name = "KEY=VALUE", value_parser = key_value)]
    pub attributes: Vec<(String, String)>,
    /// The attachment's publish context (stands in for the VolumeAttachment; makes attach
    /// required): key=value.
    #[arg(long = "publish-context", value_name = "KEY=VALUE", value_parser = key_value)]
    pub publish_context: Vec<(String, String)>,
    /// A secrets file in csi-sanity's keys, as JSON: {"NodeStageVolumeSecret": {...},
    /// "NodePublishVolumeSecret": {...}, "CreateVolumeSecret": {...}, ...}.
    #[arg(long, value_name = "FILE")]
    pub secrets: Option<PathBuf>,
    /// The pod's UID (names the pod's directories).
    #[arg(long, value_name = "UID", default_value = "kcsi-pod")]
    pub pod_uid: String,
}

#[derive(Args)]
pub struct LifecycleArgs {
    #[command(flatten)]
    pub driver: DriverArgs,
    /// An existing volume's handle.
    #[arg(
        long,
        value_name = "ID",
        required_unless_present = "create",
        conflicts_with = "create"
    )]
    pub volume_handle: Option<String>,
    /// Create the volume with the driver's Controller service first (and delete it after):
    /// its size, e.g. 10Mi.
    #[arg(long, value_name = "SIZE")]
    pub create: Option<String>,
    /// A CreateVolume parameter (the StorageClass's parameters): key=value.
    #[arg(long = "parameter", value_name = "KEY=VALUE", value_parser = key_value)]
    pub parameters: Vec<(String, String)>,
    #[command(flatten)]
    pub volume: VolumeArgs,
    /// The kubelet root dir (default: a fresh temp dir, removed after).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

#[derive(Args)]
pub struct VolumeCmd {
    #[command(flatten)]
    pub driver: DriverArgs,
    #[arg(long, value_name = "ID")]
    pub volume_handle: String,
    #[command(flatten)]
    pub volume: VolumeArgs,
    /// The kubelet root dir holding the state between commands.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
}

#[derive(Args)]
pub struct PublishedCmd {
    #[command(flatten)]
    pub driver: DriverArgs,
    #[arg(long, value_name = "ID")]
    pub volume_handle: String,
    /// The volume's name as given to stage/publish (default: derived from the handle).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    #[arg(long, value_name = "UID", default_value = "kcsi-pod")]
    pub pod_uid: String,
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
}

#[derive(Args)]
pub struct ExpandCmd {
    #[command(flatten)]
    pub cmd: VolumeCmd,
    /// The new size, e.g. 20Mi.
    #[arg(long, value_name = "SIZE")]
    pub new_size: String,
    /// Grow the volume with the Controller service first (ControllerExpandVolume), as the
    /// external-resizer does.
    #[arg(long)]
    pub controller: bool,
}

#[derive(Args)]
pub struct RootCmd {
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
}

#[derive(Args)]
pub struct WatchCmd {
    /// The kubelet root dir; registration sockets appear in <root>/plugins_registry.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
}

#[derive(Args)]
pub struct FaultProxyCmd {
    /// The socket to serve (what the caller connects to).
    #[arg(long, value_name = "SOCKET")]
    pub listen: PathBuf,
    /// The driver's socket.
    #[arg(long, value_name = "SOCKET")]
    pub upstream: PathBuf,
    /// hang:RPC, kill:RPC, drop:RPC, error:RPC:CODE[:MESSAGE], delay:RPC:DURATION
    /// (RPC@N: from the Nth matching call).
    #[arg(long, value_name = "FAULT")]
    pub fault: Vec<Fault>,
    /// Fire each fault on every matching call, not only the first.
    #[arg(long)]
    pub every: bool,
    /// Print each call on stdout.
    #[arg(long)]
    pub trace: bool,
}

#[derive(Args)]
pub struct VolumePluginCmd {
    /// The driver's CSI socket: unix:///path/csi.sock or /path/csi.sock.
    #[arg(long, value_name = "ENDPOINT")]
    pub endpoint: String,
    /// The plugin's name, as runtimes refer to it (`--driver NAME`, `-d NAME`).
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Where the volumes' descriptions and the kubelet-side state live
    /// (default: /var/lib/kcsi/NAME).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The socket to serve (default: /run/docker/plugins/NAME.sock, where Docker looks).
    #[arg(long, value_name = "SOCKET")]
    pub listen: Option<PathBuf>,
    /// The node name given to the driver (default: this host's name).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// Deadline of each CSI call, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub timeout: f64,
    /// A directory of secrets files (csi-sanity's keys as JSON, e.g.
    /// {"NodeStageVolumeSecret": {"key": "value"}}); a volume created with -o secrets=NAME
    /// sends the secrets of NAME.json, read at each call and never kept.
    #[arg(long, value_name = "DIR")]
    pub secrets_dir: Option<PathBuf>,
}

#[derive(Args)]
pub struct CreateVolumeCmd {
    /// The driver's CSI socket: unix:///path/csi.sock or /path/csi.sock.
    #[arg(long, value_name = "ENDPOINT")]
    pub endpoint: String,
    /// The volume's name (CreateVolume's idempotency key, as the PV name is).
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Its size, e.g. 10Mi.
    #[arg(long, value_name = "SIZE")]
    pub size: String,
    /// A raw block volume instead of a filesystem.
    #[arg(long)]
    pub block: bool,
    #[arg(long, value_name = "MODE", default_value = "ReadWriteOnce")]
    pub access_mode: String,
    /// A CreateVolume parameter (the StorageClass's parameters): key=value.
    #[arg(long = "parameter", value_name = "KEY=VALUE", value_parser = key_value)]
    pub parameters: Vec<(String, String)>,
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub timeout: f64,
}

#[derive(Args)]
pub struct DeleteVolumeCmd {
    #[arg(long, value_name = "ENDPOINT")]
    pub endpoint: String,
    #[arg(long, value_name = "ID")]
    pub volume_handle: String,
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub timeout: f64,
}

#[derive(Args)]
pub struct ConformanceArgs {
    /// The driver's CSI socket: unix:///path/csi.sock or /path/csi.sock.
    #[arg(long, value_name = "ENDPOINT", required_unless_present = "list")]
    pub endpoint: Option<String>,
    /// Run only the matching cases: a name, a group (`volume`), or a glob (`*.rwop`).
    #[arg(long = "case", value_name = "PATTERN")]
    pub cases: Vec<String>,
    /// Deadline of each CSI call, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub timeout: f64,
    /// Deadline of each case, clean-up apart, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0)]
    pub case_timeout: f64,
    /// A mount option the driver honours: volume.mount-options sends it and requires it in
    /// effect on the target (without one it sends noatime and only requires it accepted).
    #[arg(long = "mount-option", value_name = "OPTION")]
    pub mount_options: Vec<String>,
    /// The driver's CSIDriver sets seLinuxMount: true: volume.selinux-mount then mounts a
    /// ReadWriteOncePod volume with the pod's SELinux label as the context="..." mount option
    /// (without it that case is skipped).
    #[arg(long)]
    pub selinux_mount: bool,
    /// Also write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// List the cases and what each checks.
    #[arg(long)]
    pub list: bool,
    /// Inject a fault into each case's calls (as lifecycle --fault, RPC@N for the Nth call),
    /// to see a case fail.
    #[arg(long, value_name = "FAULT")]
    pub fault: Vec<Fault>,
    /// The shell command that runs the driver, listening on --endpoint: the suite starts it,
    /// starts it again after the crash.kill-* cases kill it inside a call, and stops it at the
    /// end. Without it those cases are skipped.
    #[arg(long, value_name = "COMMAND")]
    pub driver_command: Option<String>,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}
