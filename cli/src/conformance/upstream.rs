//! The kubelet (and sidecar) behaviours a failing case breaks, each citing upstream by file and
//! function, so a driver author can read what their driver meets in a cluster.

pub const PLUGIN_INFO: &str = "node-driver-registrar registers the driver under GetPluginInfo's \
name (cmd/csi-node-driver-registrar/main.go), and the kubelet's ValidatePlugin refuses a name \
or versions it cannot use (pkg/volume/csi/csi_plugin.go ValidatePlugin, validateVersions); the \
CSI spec makes vendor_version REQUIRED";

pub const REGISTER: &str = "the kubelet registers the driver with its NodeGetInfo answer and \
writes the node ID to the Node annotation csi.volume.kubernetes.io/nodeid and CSINode \
(pkg/volume/csi/csi_plugin.go RegisterPlugin, nodeinfomanager.go InstallCSIDriver); a node ID \
that changes across re-registrations makes InstallCSIDriver and the attacher disagree";

pub const CAPABILITIES: &str = "the kubelet asks NodeGetCapabilities before each stage, publish, \
stats and expand (pkg/volume/csi/csi_client.go nodeSupportsStageUnstage, \
nodeSupportsVolumeStats, ...), and decides by the answer whether to call them";

pub const PROVISION: &str = "the external-provisioner makes the PV with CreateVolume \
(external-provisioner pkg/controller/controller.go Provision)";

pub const ATTACH: &str = "the external-attacher attaches with ControllerPublishVolume to the \
node's NodeGetInfo ID and the kubelet waits for the VolumeAttachment, whose attachmentMetadata \
is the publish context of NodeStage/NodePublish (external-attacher pkg/controller/csi_handler.go \
syncAttach; pkg/volume/csi/csi_attacher.go WaitForAttach)";

pub const DETACH: &str = "the external-attacher detaches with ControllerUnpublishVolume and \
retries until OK, also after the volume is gone (external-attacher pkg/controller/csi_handler.go \
syncDetach)";

pub const ATTACH_LIMIT: &str = "the scheduler counts attachments against CSINode's allocatable \
(NodeGetInfo max_volumes_per_node, pkg/scheduler/framework/plugins/nodevolumelimits/csi.go), \
and the external-attacher expects RESOURCE_EXHAUSTED from a driver asked past its limit";

pub const MOUNT_DEVICE: &str = "the kubelet's MountDevice stages the volume at \
plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount, creating its parent itself \
(pkg/volume/csi/csi_attacher.go MountDevice)";

pub const SET_UP: &str = "the kubelet's SetUp publishes at \
pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount, with the parent made and the target itself \
left to the driver, then the runtime bind-mounts it into the container \
(pkg/volume/csi/csi_mounter.go SetUpAt)";

pub const TEAR_DOWN: &str = "the kubelet's TearDown calls NodeUnpublishVolume and then removes \
the target directory, which fails while anything is still mounted there \
(pkg/volume/csi/csi_mounter.go TearDownAt, removeMountDir)";

pub const UNMOUNT_DEVICE: &str = "the kubelet's UnmountDevice calls NodeUnstageVolume and then \
removes the global mount directory (pkg/volume/csi/csi_attacher.go UnmountDevice)";

pub const SET_UP_DEVICE: &str = "the kubelet's SetUpDevice stages a block volume at \
plugins/kubernetes.io/csi/volumeDevices/staging/<pv> (pkg/volume/csi/csi_block.go SetUpDevice)";

pub const MAP_POD_DEVICE: &str = "the kubelet's MapPodDevice publishes a block volume as a \
device file at plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid>, which it then \
bind-maps into the pod (pkg/volume/csi/csi_block.go MapPodDevice)";

pub const UNMAP_POD_DEVICE: &str = "the kubelet's UnmapPodDevice calls NodeUnpublishVolume on \
the device file (pkg/volume/csi/csi_block.go UnmapPodDevice)";

pub const TEAR_DOWN_DEVICE: &str = "the kubelet's TearDownDevice calls NodeUnstageVolume on the \
block staging path (pkg/volume/csi/csi_block.go TearDownDevice)";

pub const IDEMPOTENT: &str = "the kubelet repeats NodeStage/NodePublish for a volume already set \
up (each reconciler pass after a restart, an uncertain operation, a requiresRepublish \
remount) and NodeUnpublish/NodeUnstage after one whose answer it lost, and treats anything but \
OK as a failure (pkg/kubelet/volumemanager/reconciler/reconciler_common.go, \
pkg/volume/util/operationexecutor/operation_generator.go)";

pub const READ_ONLY: &str = "a readOnly volume is published with readonly: true and the \
container runtime relies on the driver's mount to refuse writes \
(pkg/volume/csi/csi_mounter.go SetUpAt, readOnly)";

pub const ACCESS_MODE: &str = "the kubelet sends the PV's access mode as the CSI mode, \
ReadWriteOncePod as SINGLE_NODE_SINGLE_WRITER only for a driver with SINGLE_NODE_MULTI_WRITER \
(pkg/volume/csi/csi_client.go asSingleNodeMultiWriterCapableCSIAccessModeV1)";

pub const MOUNT_OPTIONS: &str = "the kubelet passes the PV's mountOptions as \
VolumeCapability.Mount.mount_flags to NodeStage and NodePublish (pkg/volume/csi/csi_attacher.go \
MountDevice, csi_mounter.go SetUpAt); a driver that drops them drops the admin's options";

pub const POD_INFO: &str = "with CSIDriver podInfoOnMount the kubelet adds \
csi.storage.k8s.io/pod.name, pod.namespace, pod.uid, serviceAccount.name and ephemeral to the \
volume context of NodePublish (pkg/volume/csi/csi_mounter.go podInfo)";

pub const STATS: &str = "the kubelet's volume metrics come from NodeGetVolumeStats and are \
refused when the usage is missing or malformed (pkg/volume/csi/csi_metrics.go GetMetrics)";

pub const CONDITION: &str = "with VOLUME_CONDITION the kubelet reports the driver's volume \
condition as the volume health metric and event (pkg/volume/csi/csi_metrics.go GetMetrics, \
pkg/kubelet/server/stats/volume_stat_calculator.go)";

pub const EXPAND: &str = "after the external-resizer's ControllerExpandVolume the kubelet calls \
NodeExpandVolume on the published volume and records the new size in the PVC status \
(pkg/volume/csi/expander.go NodeExpand, pkg/volume/util/operationexecutor/\
operation_generator.go expandVolumeDuringMount / GenerateExpandInUseVolumeFunc)";

pub const UNCERTAIN: &str = "a stage or publish that times out is uncertain: the kubelet marks \
it so and retries it with the same arguments until OK, and must be able to unpublish and \
unstage what the lost call set up (pkg/volume/util/operationexecutor/operation_generator.go \
markDeviceErrorState, markVolumeErrorState; pkg/volume/csi/csi_client.go isFinalError)";

pub const RECONSTRUCT: &str = "a restarted kubelet rebuilds each mounted volume's spec from \
vol_data.json, re-registers the driver and then unpublishes and unstages the volumes no pod \
needs (pkg/volume/csi/csi_plugin.go ConstructVolumeSpec, \
pkg/kubelet/volumemanager/reconciler/reconstruct.go)";

pub const FS_GROUP: &str = "with CSIDriver fsGroupPolicy File and no VOLUME_MOUNT_GROUP, the \
kubelet gives the volume to the pod's fsGroup itself (chown, setgid on directories) after \
NodePublish, and the pod's processes rely on the filesystem keeping it \
(pkg/volume/volume_linux.go SetVolumeOwnership, pkg/volume/csi/csi_mounter.go SetUpAt)";

pub const MOUNT_GROUP: &str = "with VOLUME_MOUNT_GROUP the kubelet sends the pod's fsGroup as \
VolumeCapability.Mount.volume_mount_group to NodeStageVolume and NodePublishVolume and does not \
chown the volume itself: the driver must accept it and mount so that the volume belongs to the \
group (pkg/volume/csi/csi_attacher.go MountDevice, csi_mounter.go SetUpAt \
driverSupportsCSIVolumeMountGroup, csi_client.go NodeSupportsVolumeMountGroup)";

pub const SELINUX_MOUNT: &str = "with CSIDriver seLinuxMount: true on an SELinux node, the \
kubelet mounts a ReadWriteOncePod volume (every volume with the SELinuxMount gate, beta and off \
by default in v1.36) with the pod's SELinux label instead of having the runtime relabel each \
file: it appends context=\"<label>\" to the mount_flags of NodeStageVolume and \
NodePublishVolume, so a driver that refuses the option fails the mount and one that drops it \
leaves the pod without access to its files (pkg/volume/util/selinux.go GetMountSELinuxLabel, \
VolumeSupportsSELinuxMount; pkg/volume/csi/csi_attacher.go MountDevice, csi_mounter.go SetUpAt)";

pub const KILL_STAGE: &str = "a driver killed inside NodeStageVolume leaves the kubelet \
Unavailable with no status, which is not final: it marks the device uncertain and MountDevice \
retries the same call against the restarted driver until OK, which must accept what its \
predecessor staged (pkg/volume/csi/csi_attacher.go MountDevice, csi_client.go isFinalError; \
pkg/volume/util/operationexecutor/operation_generator.go GenerateMountVolumeFunc, \
markDeviceErrorState)";

pub const KILL_PUBLISH: &str = "a driver killed inside NodePublishVolume leaves the volume \
uncertain: SetUp retries the same call against the restarted driver until OK, which must \
accept what its predecessor mounted (pkg/volume/csi/csi_mounter.go SetUpAt, csi_client.go \
isFinalError; pkg/volume/util/operationexecutor/operation_generator.go GenerateMountVolumeFunc, \
markVolumeErrorState)";

pub const KILL_UNPUBLISH: &str = "a driver killed inside NodeUnpublishVolume fails TearDown, \
so the volume stays mounted in the kubelet's actual state and the reconciler retries the call \
against the restarted driver, which must answer OK for a target its predecessor may already \
have unmounted, and leave nothing mounted there (pkg/volume/csi/csi_mounter.go TearDownAt; \
pkg/volume/util/operationexecutor/operation_generator.go GenerateUnmountVolumeFunc)";

pub const KILL_UNSTAGE: &str = "a driver killed inside NodeUnstageVolume fails UnmountDevice, \
so the device stays globally mounted in the kubelet's actual state and the reconciler retries \
the call against the restarted driver, which must answer OK for a staging path its predecessor \
may already have unmounted (pkg/volume/csi/csi_attacher.go UnmountDevice; \
pkg/volume/util/operationexecutor/operation_generator.go GenerateUnmountDeviceFunc)";

pub const KILL_EXPAND: &str = "a driver killed inside NodeExpandVolume leaves the PVC's resize \
pending, and the kubelet calls it again on its next pass against the restarted driver, which \
must answer OK for a volume its predecessor may already have grown \
(pkg/volume/csi/expander.go NodeExpand; pkg/volume/util/operationexecutor/node_expander.go \
expandOnPlugin)";

pub const VOL_DATA_LOST: &str = "a volume dir whose vol_data.json is missing (deleted while \
still mounted, kubernetes#101911, #116847) or empty (a crash mid-write, #108217) can be neither \
rebuilt nor torn down from the file: ConstructVolumeSpec and NewUnmounter fail on it \
(pkg/volume/csi/csi_plugin.go ConstructVolumeSpec, NewUnmounter, loadVolumeData; \
pkg/kubelet/volumemanager/reconciler/reconstruct_common.go cleanupMounts) and the pod stays \
Terminating. The clean-up that works takes driver and handle from the PersistentVolume and \
calls NodeUnpublishVolume on the pod's target path and NodeUnstageVolume on the global mount \
path, retrying until OK (pkg/volume/csi/csi_mounter.go TearDownAt, csi_attacher.go \
UnmountDevice): the driver must answer both from volume_id and path alone, with no volume \
context, secrets or file of the kubelet's, again when repeated, and unmount what it mounted";

pub const EXPAND_OFFLINE: &str = "a volume resized while no pod used it is expanded by the \
kubelet at its next mount, after MountDevice and before SetUp: NodeExpandVolume with volume_path \
and staging_target_path both the global mount path; an error fails the mount and the pod does \
not start (pkg/volume/util/operationexecutor/operation_generator.go GenerateMountVolumeFunc, \
expandVolumeDuringMount; pkg/volume/csi/expander.go NodeExpand)";

pub const SECRETS: &str = "the kubelet reads the PV's nodeStageSecretRef and \
nodePublishSecretRef Secrets and sends them as the secrets of NodeStageVolume and \
NodePublishVolume (pkg/volume/csi/csi_attacher.go MountDevice, csi_mounter.go SetUpAt, \
csi_util.go getCredentialsFromSecret), the external-attacher controllerPublishSecretRef's in \
ControllerPublishVolume (external-attacher pkg/controller/csi_handler.go syncAttach); a driver \
that needs them must mount with them, and no log or report may show their values";
