// Package volumeplugin is kcsi as the kubelet's CSI volume plugin: a drop-in replacement for
// k8s.io/kubernetes/pkg/volume/csi.
//
// A kubelet changes two lines: its volume plugin list takes New(cfg) in place of
// csi.ProbeVolumePlugins(), and its plugin manager registers Plugin.RegistrationHandler() for
// the "CSIPlugin" type in place of csi.PluginHandler. The plugin is named kubernetes.io/csi,
// so the on-disk layout under the kubelet root and the kubelet's name-keyed lookups stay as
// they are; volumes set up by either plugin are torn down and reconstructed by the other.
//
// The plugin implements every interface upstream's csiPlugin does (VolumePlugin,
// AttachableVolumePlugin, DeviceMountableVolumePlugin, BlockVolumePlugin,
// NodeExpandableVolumePlugin), and its mounters, unmounters, attachers and block mappers
// those upstream's do, checked at compile time: the kubelet finds capabilities by type
// assertion. kcsi's error classes become the kubelet's types: uncertain errors are
// volumetypes.UncertainProgressError, transient ones TransientOperationFailure, so the
// operation executor records the same volume states as with upstream.
//
// Every CSI RPC lands in csi_operations_seconds of the kubelet's own /metrics
// (legacyregistry), labelled as upstream's (driver_name, method_name, grpc_status_code,
// migrated): the plugin's collector reads every live kcsi host on each scrape.
//
// Deliberate differences from upstream:
//   - kcsi's requests go out through the VolumeHost's client (its identity, credentials, user
//     agent and QPS limiter) over a loopback relay to kcsi's own HTTP stack (Config.Kubeconfig
//     makes kcsi use a client of its own instead); it does not use the VolumeHost's
//     service-account token getter (kcsi requests tokens itself and caches them per host as
//     the kubelet's token manager does). It reads the CSIDriver objects from the VolumeHost's
//     informer with Config.CSIDriversFromVolumeHost (as upstream reads its lister), and
//     otherwise lists and watches them itself.
//   - SetUpAt and TearDownAt accept only the mounter's own path (the kubelet never passes
//     another); kcsi owns the layout.
//   - When kcsi applies fsGroup itself (the driver lacks VOLUME_MOUNT_GROUP), it reports no
//     progress events through MounterArgs.Recorder and ignores
//     MounterArgs.VolumeOwnershipApplicator.
//   - In the kube-controller-manager, ProbeAttachableVolumePlugins(cfg) replaces
//     csi.ProbeVolumePlugins() in the attach/detach controller's plugin list; Init then gets the
//     controller's AttachDetachVolumeHost (no node name, no pods dir) and kcsi runs as a
//     controller host that reads the VolumeAttachments and CSIDrivers from the controller's
//     listers (controller_feeds.go). While Attach and Detach wait, the VolumeAttachment is
//     read from the lister every 50 ms instead of with upstream's 500 ms to 7 s backoff. On a
//     kubelet Attach and Detach fail, as upstream's, and VolumesAreAttached checks each
//     VolumeAttachment once.
//   - GetDeviceMountRefs asks the VolumeHost's mounter, as upstream does.
//   - On a kubelet, a volume staged before Init that no pod uses (the kubelet was killed
//     between NodeUnpublishVolume and NodeUnstageVolume, kubernetes/kubernetes#85476) is
//     unstaged once no pod bound to the node has referenced it for Config.OrphanGracePeriod;
//     upstream's plugin leaves it staged (orphans.go, docs/crash-safety.md).
package volumeplugin
