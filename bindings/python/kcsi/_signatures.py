"""ctypes signatures of libkcsi, GENERATED from include/kcsi.h by
bindings/python/gen_signatures.py. Do not edit; regenerate with
`python3 bindings/python/gen_signatures.py` (CI runs it with --check).
"""
# fmt: off
import ctypes

# Opaque handle types: distinct classes, so ctypes refuses a mounter where a host is expected.
class kcsi_attacher(ctypes.Structure):
    pass

class kcsi_block_mapper(ctypes.Structure):
    pass

class kcsi_block_unmapper(ctypes.Structure):
    pass

class kcsi_error(ctypes.Structure):
    pass

class kcsi_host(ctypes.Structure):
    pass

class kcsi_mounter(ctypes.Structure):
    pass

class kcsi_unmounter(ctypes.Structure):
    pass

kcsi_log_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_char_p)

CONSTANTS = {'KCSI_API_VERSION': 1,
 'KCSI_CLASS_FINAL': 0,
 'KCSI_CLASS_TRANSIENT': 2,
 'KCSI_CLASS_UNCERTAIN': 1,
 'KCSI_ERR_ALREADY_EXISTS': 3,
 'KCSI_ERR_DRIVER': 5,
 'KCSI_ERR_FAILED_PRECONDITION': 11,
 'KCSI_ERR_INTERNAL': 12,
 'KCSI_ERR_INVALID_ARGUMENT': 1,
 'KCSI_ERR_IO': 7,
 'KCSI_ERR_KUBERNETES': 6,
 'KCSI_ERR_NOT_FOUND': 2,
 'KCSI_ERR_NOT_SUPPORTED': 9,
 'KCSI_ERR_TIMEOUT': 8,
 'KCSI_ERR_UNAVAILABLE': 10,
 'KCSI_ERR_UNSUPPORTED_VERSION': 4,
 'KCSI_OK': 0}

OPAQUE = ('kcsi_attacher', 'kcsi_block_mapper', 'kcsi_block_unmapper', 'kcsi_error', 'kcsi_host', 'kcsi_mounter', 'kcsi_unmounter')

# name -> the parameters its header doc's "Nullable:" line names (err_out always may be NULL)
NULLABLE = {
    'kcsi_attacher_mount_device': ('args_json',),
    'kcsi_mounter_set_up': ('args_json',),
    'kcsi_block_unmapper_tear_down_device': ('global_map_path', 'device_path'),
    'kcsi_set_log_callback': ('cb', 'user_data'),
}

# name -> (C return type, ((C type, parameter name), ...), doc comment)
FUNCTIONS = {
    'kcsi_version': ('const char *', (), 'The library version, e.g. "0.1.0". Static: do not free.'),
    'kcsi_result_name': ('const char *', (('kcsi_result', 'r'),), 'The name of a result code, e.g. "KCSI_ERR_NOT_FOUND"; "KCSI_UNKNOWN_RESULT" for a number kcsi does not define. Static: do not free.'),
    'kcsi_error_result': ('kcsi_result', (('const kcsi_error *', 'e'),), 'The result code carried by `e`. `KCSI_ERR_INVALID_ARGUMENT` when `e` is NULL.'),
    'kcsi_error_message': ('const char *', (('const kcsi_error *', 'e'),), 'The message of `e`: what failed, with which input. Borrowed: valid until `kcsi_error_free(e)`. NULL when `e` is NULL.'),
    'kcsi_error_upstream_message': ('const char *', (('const kcsi_error *', 'e'),), "The message as upstream's plugin (`pkg/volume/csi`) words this failure, for hosts that show it to Kubernetes users (the kubelet's and the attach/detach controller's events, a claim's conditions): `kcsi_error_message` without the context kcsi adds (which driver, at which socket), or the same text when kcsi adds none. Borrowed: valid until `kcsi_error_free(e)`. NULL when `e` is NULL."),
    'kcsi_error_grpc_code': ('int32_t', (('const kcsi_error *', 'e'),), "The gRPC status code the CSI driver returned, or -1 when the error did not come from a driver's answer (also for a NULL `e`)."),
    'kcsi_error_class': ('int32_t', (('const kcsi_error *', 'e'),), 'The class of `e`: `KCSI_CLASS_FINAL`, `KCSI_CLASS_UNCERTAIN` or `KCSI_CLASS_TRANSIENT`; -1 when `e` is NULL.'),
    'kcsi_error_free': ('void', (('kcsi_error *', 'e'),), 'Frees an error. Calling with NULL is fine.'),
    'kcsi_string_free': ('void', (('char *', 's'),), 'Frees a string kcsi returned through an `*_out` parameter. Calling with NULL is fine.'),
    'kcsi_host_new': ('kcsi_result', (('const char *', 'config_json'), ('kcsi_host **', 'host_out'), ('kcsi_error **', 'err_out')), 'Creates a host from `config_json` (see the C API contract: `nodeName` and `rootDir` are required; unknown keys are rejected). With `"pluginWatcher": true` the host watches `<rootDir>/plugins_registry/` (or `"pluginsRegistryDir"`, an absolute path) for node-driver-registrar sockets and registers their drivers as the kubelet\'s plugin manager does; the directory is created if missing. On success `*host_out` receives a host the caller owns and frees with `kcsi_host_free`; on error it is unchanged.'),
    'kcsi_host_status': ('kcsi_result', (('kcsi_host *', 'h'), ('char **', 'status_json_out'), ('kcsi_error **', 'err_out')), 'The host\'s status as JSON: `{"csiNodeInitialized", "lastError", "drivers", ..., "pluginWatcher"}`. `pluginWatcher` is null unless configured, else `{"dir", "socketsSeen", "lastError", "sockets": [{"path", "state", "driver", "endpoint", "attempts", "lastError"}]}` with `state` one of `registering`, `registered` or `retrying` (failed, tried again with backoff). Caller frees `*status_json_out` with `kcsi_string_free`.'),
    'kcsi_host_free': ('void', (('kcsi_host *', 'h'),), 'Frees a host and stops its background work, the plugin watcher at once (drivers it registered stay registered, as when a kubelet stops). Handles created from it stay valid and then fail with `KCSI_ERR_FAILED_PRECONDITION`. A call on the host still running in another thread finishes first (the host goes when the last such call returns). Calling with NULL is fine.'),
    'kcsi_host_metrics': ('kcsi_result', (('kcsi_host *', 'h'), ('char **', 'text_out'), ('kcsi_error **', 'err_out')), "The host's metrics in the Prometheus text exposition format (version 0.0.4), ready to serve on a `/metrics` endpoint: `csi_operations_seconds` (as upstream's kubelet: labels `driver_name`, `method_name`, `grpc_status_code`, `migrated`), and kcsi's own `kcsi_driver_registrations_total`, `kcsi_registered_drivers`, `kcsi_api_requests_total`. Each host has its own registry. Caller frees `*text_out` with `kcsi_string_free`."),
    'kcsi_validate_plugin': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'name'), ('const char *', 'endpoint'), ('const char *const *', 'versions'), ('size_t', 'versions_len'), ('kcsi_error **', 'err_out')), "Checks a driver's name, endpoint and supported versions as the kubelet's `ValidatePlugin` does, without registering anything. `versions` is an array of `versions_len` strings."),
    'kcsi_register_plugin': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'name'), ('const char *', 'endpoint'), ('const char *const *', 'versions'), ('size_t', 'versions_len'), ('int64_t', 'timeout_ms'), ('kcsi_error **', 'err_out')), "Registers a CSI driver as the kubelet's `RegisterPlugin` does: stores it, calls `NodeGetInfo` over its socket and publishes the node info (with a kubeconfig: Node and CSINode). Any failure rolls the registration back. Blocks for at most `timeout_ms` milliseconds (`<= 0`: the host's timeout)."),
    'kcsi_deregister_plugin': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'name'), ('kcsi_error **', 'err_out')), "Deregisters a CSI driver as the kubelet's `DeRegisterPlugin` does and removes its node info. `KCSI_ERR_NOT_FOUND` when no driver of that name is registered (node info is still cleaned up)."),
    'kcsi_list_drivers': ('kcsi_result', (('kcsi_host *', 'h'), ('char **', 'drivers_json_out'), ('kcsi_error **', 'err_out')), 'The registered drivers as a JSON array of `{"name", "endpoint", "highestSupportedVersion", "nodeId", "maxVolumesPerNode", "topology"}`, sorted by name. Caller frees `*drivers_json_out` with `kcsi_string_free`.'),
    'kcsi_get_volume_name': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('char **', 'name_out'), ('kcsi_error **', 'err_out')), 'The unique volume name `<driver>^<volumeHandle>` of a PersistentVolume spec (inline volumes have none: `KCSI_ERR_INVALID_ARGUMENT`). Caller frees `*name_out` with `kcsi_string_free`.'),
    'kcsi_can_support': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('bool *', 'out'), ('kcsi_error **', 'err_out')), 'Whether the spec has a CSI source (PV or inline).'),
    'kcsi_can_attach': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('bool *', 'out'), ('kcsi_error **', 'err_out')), 'Whether the volume needs attaching: false for inline volumes and for drivers whose CSIDriver says `attachRequired: false`; true when no CSIDriver exists.'),
    'kcsi_driver_attach_required': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'driver_name'), ('bool *', 'out'), ('kcsi_error **', 'err_out')), "`kcsi_can_attach` for a PersistentVolume of `driver_name`, without a spec to encode and parse: whether the driver's CSIDriver says `attachRequired` (true when none exists). For a caller that asks it of every volume in a loop, as the kubelet's reconciler does every 100 ms."),
    'kcsi_host_csidriver_generation': ('kcsi_result', (('kcsi_host *', 'h'), ('const uint64_t **', 'out'), ('kcsi_error **', 'err_out')), "A counter kcsi increments after every change to the CSIDriver objects its driver facts (`kcsi_driver_attach_required`, `kcsi_can_attach`, `kcsi_requires_remount`, ...) come from: the API server's, watched or fed by the program (`kcsi_host_csidriver_apply`), or the host config's, which never change. `*out` points to it until `kcsi_host_free`; read it with an atomic 64-bit load (acquire). kcsi moves it once its answers reflect a change, so an answer cached together with the value read before asking is replaced as soon as the value moves: a caller that asks the same query of every volume in a loop may answer from its cache."),
    'kcsi_host_csidriver_apply': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'csidriver_json'), ('kcsi_error **', 'err_out')), 'On a host made with `"csiDriversFromHost": true`: a CSIDriver object (JSON, as the API server serves it) that the program\'s own informer added or updated. kcsi then sends no CSIDriver list or watch of its own; its driver facts and `kcsi_host_csidriver_generation` follow what the program feeds. `KCSI_ERR_FAILED_PRECONDITION` on other hosts.'),
    'kcsi_host_csidriver_delete': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'name'), ('kcsi_error **', 'err_out')), 'On a `"csiDriversFromHost"` host: the CSIDriver `name` was deleted. `KCSI_ERR_NOT_FOUND` when kcsi had no such object (nothing changes).'),
    'kcsi_host_csidrivers_synced': ('kcsi_result', (('kcsi_host *', 'h'), ('kcsi_error **', 'err_out')), 'On a `"csiDriversFromHost"` host: the program\'s informer has synced, every CSIDriver it listed has been applied. Until then a driver-facts lookup on a caller\'s thread waits up to 5 s for it and then fails with a transient `KCSI_ERR_UNAVAILABLE`, as before kcsi\'s own first list.'),
    'kcsi_host_volumeattachment_apply': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'volumeattachment_json'), ('kcsi_error **', 'err_out')), 'On a controller host made with `"volumeAttachmentsFromHost": true`: a VolumeAttachment (JSON, as the API server serves it) that the program\'s informer (the attach/detach controller\'s) added or updated. kcsi then sends no VolumeAttachment list or watch of its own: Attach and Detach wait on, and VolumesAreAttached reads, what the program feeds, so the program feeds the attachment an Attach or Detach waits on while the call runs. `KCSI_ERR_FAILED_PRECONDITION` on other hosts.'),
    'kcsi_host_volumeattachment_delete': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'name'), ('kcsi_error **', 'err_out')), 'On a `"volumeAttachmentsFromHost"` host: the VolumeAttachment `name` is gone. `KCSI_ERR_NOT_FOUND` when kcsi had no such object (nothing changes).'),
    'kcsi_host_volumeattachments_synced': ('kcsi_result', (('kcsi_host *', 'h'), ('kcsi_error **', 'err_out')), 'On a `"volumeAttachmentsFromHost"` host: the program\'s informer has synced. Until then kcsi does not trust a VolumeAttachment\'s absence from what was fed: Attach creates it (AlreadyExists tolerated) and VolumesAreAttached asks the API server.'),
    'kcsi_can_device_mount': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('bool *', 'out'), ('kcsi_error **', 'err_out')), 'Whether the volume is device-mounted (staged): true for PersistentVolumes, false for inline volumes.'),
    'kcsi_requires_remount': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('bool *', 'out'), ('kcsi_error **', 'err_out')), "Whether the volume must be re-published periodically (the CSIDriver's `requiresRepublish`); false when the driver has no CSIDriver object."),
    'kcsi_supports_selinux_context_mount': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('bool *', 'out'), ('kcsi_error **', 'err_out')), "Whether the volume may be mounted with `-o context=<label>` (the kubelet's `SupportsSELinuxContextMount`): with the gate `SELinuxMountReadWriteOncePod`, the CSIDriver's `seLinuxMount` (false when the driver has no CSIDriver object); false without the gate. A spec without a CSI source is `KCSI_ERR_INVALID_ARGUMENT`."),
    'kcsi_attacher_new': ('kcsi_result', (('kcsi_host *', 'h'), ('kcsi_attacher **', 'out'), ('kcsi_error **', 'err_out')), 'Creates an attacher for host `h`. On success `*out` receives a handle the caller owns and frees with `kcsi_attacher_free`; on error it is unchanged.'),
    'kcsi_attacher_wait_for_attach': ('kcsi_result', (('kcsi_attacher *', 'a'), ('const char *', 'spec_json'), ('int64_t', 'timeout_ms'), ('char **', 'device_path_out'), ('kcsi_error **', 'err_out')), "Checks once that the volume's VolumeAttachment (`csi-<sha256(handle+driver+node)>`) is attached, and writes its name to `*device_path_out` (caller frees it with `kcsi_string_free`). Not attached yet or unreadable: transient; attach error (its message verbatim) or being deleted: final. `timeout_ms <= 0`: the host's timeout. A plain spec with a `publishContext` counts as attached without a read."),
    'kcsi_attacher_device_mount_path': ('kcsi_result', (('kcsi_attacher *', 'a'), ('const char *', 'spec_json'), ('char **', 'path_out'), ('kcsi_error **', 'err_out')), 'The global (staging) mount path of a PersistentVolume spec: `<rootDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`. Caller frees `*path_out` with `kcsi_string_free`.'),
    'kcsi_attacher_mount_device': ('kcsi_result', (('kcsi_attacher *', 'a'), ('const char *', 'spec_json'), ('const char *', 'device_mount_path'), ('const char *', 'args_json'), ('kcsi_error **', 'err_out')), 'MountDevice: creates `device_mount_path` (mode 0750), records `vol_data.json` next to it and, when the driver has STAGE_UNSTAGE_VOLUME, calls NodeStageVolume there. `args_json` (NULL = none): `{"fsGroup": int, "seLinuxLabel": string}`. Errors are classed as the kubelet\'s: uncertain when the driver may still be staging, transient when nothing changed. Nullable: args_json.'),
    'kcsi_attacher_unmount_device': ('kcsi_result', (('kcsi_attacher *', 'a'), ('const char *', 'device_mount_path'), ('kcsi_error **', 'err_out')), "UnmountDevice: NodeUnstageVolume (when the driver has STAGE_UNSTAGE_VOLUME) with what the `vol_data.json` next to `device_mount_path` recorded, then removes the global mount dir. Succeeds without NodeUnstageVolume when that file is missing (as upstream), removing the global dir only when it holds nothing but kcsi's temp files (an interrupted MountDevice or UnmountDevice); a `globalmount` there is kept for `kcsi_list_device_mounts` and `kcsi_unmount_device_by_handle`. A corrupt file is an error. A symlink below the root on the way is `KCSI_ERR_FAILED_PRECONDITION`, and nothing is done."),
    'kcsi_attacher_attach': ('kcsi_result', (('kcsi_attacher *', 'a'), ('const char *', 'spec_json'), ('const char *', 'node_name'), ('int64_t', 'timeout_ms'), ('char **', 'attach_id_out'), ('kcsi_error **', 'err_out')), 'Controller hosts only (`"role": "controller"`). Attach: creates the VolumeAttachment `csi-<sha256(handle+driver+node)>` for a PersistentVolume spec on `node_name` (its `spec.source` the PV\'s name, or with `"inlineVolumeSpecForCSIMigration": true` the PV\'s spec; one that exists is kept) and waits on the host\'s watch until the external-attacher sets `status.attached` (the name is written to `*attach_id_out`, freed with `kcsi_string_free`) or `status.attachError` (final `KCSI_ERR_DRIVER`, its message verbatim, its `errorCode` as the gRPC code), or until `timeout_ms` passes (transient `KCSI_ERR_TIMEOUT`, "timed out waiting for external-attacher of <driver> CSI driver to attach volume <handle>"). `timeout_ms <= 0`: the host\'s timeout. On a node host: `KCSI_ERR_NOT_SUPPORTED` ("attaching volumes from the kubelet is not supported").'),
    'kcsi_attacher_detach': ('kcsi_result', (('kcsi_attacher *', 'a'), ('const char *', 'volume_name'), ('const char *', 'node_name'), ('int64_t', 'timeout_ms'), ('kcsi_error **', 'err_out')), "Controller hosts only. Detach: `volume_name` is `<driver>^<handle>` (what `kcsi_get_volume_name` returns); deletes that volume's VolumeAttachment on `node_name` and waits until it is gone (the external-attacher called ControllerUnpublishVolume). `status.detachError` is a final `KCSI_ERR_DRIVER`; an attachment that does not exist is `KCSI_OK`; the timeout is a transient `KCSI_ERR_TIMEOUT`. `timeout_ms <= 0`: the host's timeout."),
    'kcsi_attacher_volumes_are_attached': ('kcsi_result', (('kcsi_attacher *', 'a'), ('const char *', 'specs_json'), ('const char *', 'node_name'), ('char **', 'json_out'), ('kcsi_error **', 'err_out')), "Controller hosts only. VolumesAreAttached: `specs_json` is a JSON array of PersistentVolume specs; `*json_out` (freed with `kcsi_string_free`) a JSON array of booleans in the same order: whether each volume's VolumeAttachment on `node_name` has `status.attached`, read from the host's watch (a GET when the watch lacks it). A driver whose CSIDriver says `attachRequired: false` is attached; a failed lookup is not."),
    'kcsi_attacher_free': ('void', (('kcsi_attacher *', 'a'),), 'Frees an attacher. Calling with NULL is fine.'),
    'kcsi_verify_exhausted_resource': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('bool *', 'out'), ('kcsi_error **', 'err_out')), "Whether a PersistentVolume's attach failed because the node has no capacity left for its driver: its VolumeAttachment's `attachError.errorCode` is gRPC ResourceExhausted (8). If so, the driver's CSINode `allocatable.count` is refreshed from `NodeGetInfo` before `*out` is set to true. Only drivers whose CSIDriver sets `nodeAllocatableUpdatePeriodSeconds` take part (gate `MutableCSINodeAllocatableCount`); a lookup that fails, a standalone host or an inline volume answer false (logged), as upstream. Call it when a pod's volumes stay unattached."),
    'kcsi_list_device_mounts': ('kcsi_result', (('kcsi_host *', 'h'), ('char **', 'mounts_json_out'), ('kcsi_error **', 'err_out')), 'The device mounts (staged volumes) below `<rootDir>/plugins/kubernetes.io/csi` as a JSON array sorted by path, one object per global mount dir (`<driver>/<sha256(handle)>/globalmount`, `"kind": "filesystem"`) and per block volume (its staging path `volumeDevices/staging/<spec>`, also when only its `volumeDevices/<spec>/data` is left; `"kind": "block"`): `{"kind", "driver", "volumeHandle", "specName", "deviceMountPath", "mounted", "volumeDataFile", "volumeData", "volumeDataError"}`. `volumeData` is the file\'s keys, or null with `volumeDataError` saying why (missing, corrupt); `driver` of a filesystem entry comes from its path, so it is known even without the file. Symlinks are skipped, never followed. Caller frees `*mounts_json_out` with `kcsi_string_free`.'),
    'kcsi_unmount_device_by_handle': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'driver'), ('const char *', 'volume_handle'), ('kcsi_error **', 'err_out')), 'UnmountDevice of the volume `volume_handle` of `driver`, for when its `vol_data.json` may be gone: NodeUnstageVolume (when the driver has STAGE_UNSTAGE_VOLUME) at `<rootDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`, then removal of the global mount dir, as `kcsi_attacher_unmount_device`. A `vol_data.json` that is there but names another driver or handle is `KCSI_ERR_FAILED_PRECONDITION`; an unregistered driver is `KCSI_ERR_NOT_FOUND` (transient). When there is no such global mount dir but a block volume (`kcsi_list_device_mounts`\' `"kind": "block"`) records the driver and handle, that volume is torn down as `kcsi_block_unmapper_tear_down_device` does.'),
    'kcsi_mounter_new': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('const char *', 'pod_json'), ('kcsi_mounter **', 'out'), ('kcsi_error **', 'err_out')), 'Creates a mounter for `spec_json` (`{"persistentVolume": <PV>, "readOnly": bool}`, `{"volume": <Volume>}`, or the plain form below) in the pod `pod_json` (a core/v1 Pod; `metadata.uid` required). Does no I/O and needs no registered driver. Unsafe pod UIDs or volume names are `KCSI_ERR_INVALID_ARGUMENT`. On success `*out` receives a mounter the caller frees with `kcsi_mounter_free`; on error it is unchanged.  Plain form, for hosts without Kubernetes objects (every call that takes `spec_json` accepts it): `{"csi": {"driver", "volumeHandle", "specName", "volumeAttributes": {..}, "accessMode": "ReadWriteOnce", "volumeMode": "Filesystem"|"Block", "fsType", "mountOptions": [..], "readOnly": bool, "nodeStageSecrets"/"nodePublishSecrets"/ "nodeExpandSecrets": {..} or "secretsFile": "/abs/path.json", "publishContext": {..}}, "readOnly": bool}`. It acts as the PersistentVolume named `specName` with that CSI source (same paths, same `vol_data.json`). The secrets file uses csi-sanity\'s keys (`{"NodeStageVolumeSecret": {..}, "NodePublishVolumeSecret": {..}, ...}`) and is read at each operation (unreadable: transient). `publishContext` stands in for the VolumeAttachment when the CSIDriver requires attach.'),
    'kcsi_mounter_path': ('kcsi_result', (('kcsi_mounter *', 'm'), ('char **', 'path_out'), ('kcsi_error **', 'err_out')), 'The mount path the volume is published at: `<rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<spec>/mount`. Caller frees `*path_out` with `kcsi_string_free`.'),
    'kcsi_mounter_set_up': ('kcsi_result', (('kcsi_mounter *', 'm'), ('const char *', 'args_json'), ('kcsi_error **', 'err_out')), 'Publishes the volume (the kubelet\'s `SetUp`): NodePublishVolume into the mount path, with `vol_data.json` written beside it. `args_json` (NULL = none): `{"fsGroup": int, "fsGroupChangePolicy": "Always"|"OnRootMismatch", "seLinuxLabel": string, "reconstructedVolume": bool, "isRemount": bool}`, all optional, unknown keys rejected. Errors carry the class the kubelet acts on: transient (driver not registered, Kubernetes lookups), uncertain (the driver may still be publishing), or final (then the directory is removed unless something is mounted on it, or the volume is a reconstructed one or a remount, which a pod may already use). A symlink anywhere below the root on the way to the mount path is refused (`KCSI_ERR_FAILED_PRECONDITION`, naming it) before anything is written there or sent to the driver. Concurrent calls on the same volume run one after the other. Nullable: args_json.'),
    'kcsi_mounter_metrics': ('kcsi_result', (('kcsi_mounter *', 'm'), ('char **', 'metrics_json_out'), ('kcsi_error **', 'err_out')), 'The published volume\'s usage from NodeGetVolumeStats as JSON: `{"time", "capacityBytes", "availableBytes", "usedBytes", "inodes", "inodesFree", "inodesUsed"}`, plus `"abnormal"` and `"message"` when the gate `CSIVolumeHealth` is on and the driver reports volume conditions. `KCSI_ERR_NOT_SUPPORTED` when the driver lacks GET_VOLUME_STATS. Caller frees `*metrics_json_out` with `kcsi_string_free`.'),
    'kcsi_mounter_free': ('void', (('kcsi_mounter *', 'm'),), 'Frees a mounter (the volume stays published). Calling with NULL is fine.'),
    'kcsi_unmounter_new': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_name'), ('const char *', 'pod_uid'), ('kcsi_unmounter **', 'out'), ('kcsi_error **', 'err_out')), "Creates an unmounter for the volume `spec_name` of pod `pod_uid` from the `vol_data.json` its SetUp wrote (so it works after a restart, with a new host). A missing file is `KCSI_ERR_NOT_FOUND` — unless the volume dir holds only kcsi's temp files (an interrupted SetUp or TearDown): then the unmounter's tear-down just removes them. A corrupt file is `KCSI_ERR_IO`; unsafe names `KCSI_ERR_INVALID_ARGUMENT`; a symlink below the root on the way `KCSI_ERR_FAILED_PRECONDITION`. On success `*out` receives an unmounter the caller frees with `kcsi_unmounter_free`."),
    'kcsi_unmounter_tear_down': ('kcsi_result', (('kcsi_unmounter *', 'u'), ('kcsi_error **', 'err_out')), "Tears the volume down (the kubelet's `TearDown`): NodeUnpublishVolume, then removes the mount dir and `vol_data.json` unless the target is still mounted. A driver that is not registered is transient; a failed NodeUnpublishVolume is final."),
    'kcsi_unmounter_free': ('void', (('kcsi_unmounter *', 'u'),), 'Frees an unmounter. Calling with NULL is fine.'),
    'kcsi_block_mapper_new': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_json'), ('const char *', 'pod_json'), ('kcsi_block_mapper **', 'out'), ('kcsi_error **', 'err_out')), 'Creates a block mapper for a `volumeMode: Block` PersistentVolume (or plain) spec and a pod (core/v1 Pod JSON with `metadata.uid`), and writes `<rootDir>/plugins/kubernetes.io/csi/volumeDevices/<spec>/data/vol_data.json`. On success `*out` receives a handle the caller frees with `kcsi_block_mapper_free`.'),
    'kcsi_block_mapper_paths': ('kcsi_result', (('kcsi_block_mapper *', 'm'), ('char **', 'paths_json_out'), ('kcsi_error **', 'err_out')), 'The mapper\'s paths as JSON: `{"globalMapPath", "stagingPath", "publishDir", "publishPath", "podDeviceMapPath", "podDeviceMapName", "volumeDataDir", "metricsPath"}`. Caller frees `*paths_json_out` with `kcsi_string_free`.'),
    'kcsi_block_mapper_set_up_device': ('kcsi_result', (('kcsi_block_mapper *', 'm'), ('char **', 'staging_path_out'), ('kcsi_error **', 'err_out')), 'SetUpDevice: NodeStageVolume with block access at the staging path, when the driver has STAGE_UNSTAGE_VOLUME. `*staging_path_out` receives the staging path, or "" when the driver does not stage (caller frees it with `kcsi_string_free`). A final error removes the volume\'s files (vol_data.json included).'),
    'kcsi_block_mapper_map_pod_device': ('kcsi_result', (('kcsi_block_mapper *', 'm'), ('char **', 'publish_path_out'), ('kcsi_error **', 'err_out')), 'MapPodDevice: NodePublishVolume with block access; the driver creates the device file at the publish path, written to `*publish_path_out` (caller frees it with `kcsi_string_free`).'),
    'kcsi_block_mapper_metrics': ('kcsi_result', (('kcsi_block_mapper *', 'm'), ('char **', 'metrics_json_out'), ('kcsi_error **', 'err_out')), "The mapped block volume's usage from NodeGetVolumeStats on `<globalMapPath>/<podUID>`, as JSON in `kcsi_mounter_metrics`' form. `KCSI_ERR_NOT_SUPPORTED` when the driver lacks GET_VOLUME_STATS. Caller frees `*metrics_json_out` with `kcsi_string_free`."),
    'kcsi_block_mapper_free': ('void', (('kcsi_block_mapper *', 'm'),), 'Frees a block mapper. Calling with NULL is fine.'),
    'kcsi_block_unmapper_new': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'spec_name'), ('const char *', 'pod_uid'), ('kcsi_block_unmapper **', 'out'), ('kcsi_error **', 'err_out')), 'Creates a block unmapper from the volume\'s `data/vol_data.json`. `pod_uid` may be "" to only tear the device down (the kubelet\'s UnmountDevice has no pod). A missing file is `KCSI_ERR_NOT_FOUND`, unless an interrupted teardown left only kcsi\'s temp files (no staging path): then the handle\'s teardown just removes them. On success `*out` receives a handle the caller frees with `kcsi_block_unmapper_free`.'),
    'kcsi_block_unmapper_unmap_pod_device': ('kcsi_result', (('kcsi_block_unmapper *', 'u'), ('kcsi_error **', 'err_out')), "UnmapPodDevice: NodeUnpublishVolume of the pod's publish path. Needs an unmapper made with a pod UID."),
    'kcsi_block_unmapper_tear_down_device': ('kcsi_result', (('kcsi_block_unmapper *', 'u'), ('const char *', 'global_map_path'), ('const char *', 'device_path'), ('kcsi_error **', 'err_out')), "TearDownDevice: NodeUnstageVolume when the staging path exists, then removal of the volume's leftover files without crossing a mount point. `global_map_path` and `device_path` (either may be NULL) are only logged, as upstream only logs them. Nullable: global_map_path, device_path."),
    'kcsi_block_unmapper_free': ('void', (('kcsi_block_unmapper *', 'u'),), 'Frees a block unmapper. Calling with NULL is fine.'),
    'kcsi_node_expand': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'options_json'), ('bool *', 'resized_out'), ('kcsi_error **', 'err_out')), 'Expands a volume on this node (NodeExpandVolume). `options_json`: `{"spec": <spec>, "devicePath", "deviceMountPath", "deviceStagePath", "newSize": "<quantity>", "oldSize": "<quantity>"}`; block volumes (`volumeMode: Block`) are expanded at `devicePath`, others at `deviceMountPath`. On success `*resized_out` is true. A driver without EXPAND_VOLUME gives `KCSI_ERR_NOT_SUPPORTED` (the volume was not resized). The driver\'s gRPC code stays on the error: FailedPrecondition (in use) and InvalidArgument / OutOfRange / NotFound (infeasible) are final; codes that may still be in progress are uncertain.'),
    'kcsi_construct_volume_spec': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'volume_name'), ('const char *', 'mount_path'), ('char **', 'reconstructed_json_out'), ('kcsi_error **', 'err_out')), 'Rebuilds the spec of a mounted volume from `<mount_path>/vol_data.json`, `mount_path` being the per-volume dir `<rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<spec>` (anything outside `<rootDir>/pods/` is `KCSI_ERR_INVALID_ARGUMENT`). `*reconstructed_json_out` receives `{"spec": <spec_json as the other calls take it>, "seLinuxMountContext": "<label or empty>"}`: a PersistentVolume (volumeMode Filesystem) with driver and handle, or for an ephemeral volume an inline Volume with its driver. A missing file is `KCSI_ERR_NOT_FOUND`. Caller frees the string with `kcsi_string_free`.'),
    'kcsi_construct_block_volume_spec': ('kcsi_result', (('kcsi_host *', 'h'), ('const char *', 'pod_uid'), ('const char *', 'spec_name'), ('const char *', 'map_path'), ('char **', 'spec_json_out'), ('kcsi_error **', 'err_out')), 'Rebuilds a block volume\'s spec after a restart from its `data/vol_data.json`: `{"persistentVolume": <PV with name, csi.driver, csi.volumeHandle, volumeMode Block>, "readOnly": false}`. `pod_uid` and `map_path` are only logged. Caller frees `*spec_json_out` with `kcsi_string_free`.'),
    'kcsi_set_log_callback': ('kcsi_result', (('kcsi_log_fn', 'cb'), ('void *', 'user_data'), ('int32_t', 'max_level'), ('kcsi_error **', 'err_out')), 'Routes kcsi\'s log records with a level up to `max_level` (0 error .. 4 trace) to `cb`, or back to stderr when `cb` is NULL. Returns only once no record is still being delivered to the previous callback, so its `user_data` may be freed right after; a callback must never wait for a thread that is calling this. Refused (`KCSI_ERR_INVALID_ARGUMENT`) from inside a callback. A record\'s message is the text followed by its fields as klog writes them (`msg driver="d" volume="v"`). Only kcsi\'s own records are routed; the libraries under it are silent unless the environment variable `KCSI_LOG_LIBRARIES=1` is set. Nullable: cb, user_data.'),
}

# name -> (restype, argtypes)
CTYPES = {
    'kcsi_version': (ctypes.c_char_p, []),
    'kcsi_result_name': (ctypes.c_char_p, [ctypes.c_int32]),
    'kcsi_error_result': (ctypes.c_int32, [ctypes.POINTER(kcsi_error)]),
    'kcsi_error_message': (ctypes.c_char_p, [ctypes.POINTER(kcsi_error)]),
    'kcsi_error_upstream_message': (ctypes.c_char_p, [ctypes.POINTER(kcsi_error)]),
    'kcsi_error_grpc_code': (ctypes.c_int32, [ctypes.POINTER(kcsi_error)]),
    'kcsi_error_class': (ctypes.c_int32, [ctypes.POINTER(kcsi_error)]),
    'kcsi_error_free': (None, [ctypes.POINTER(kcsi_error)]),
    'kcsi_string_free': (None, [ctypes.POINTER(ctypes.c_char)]),
    'kcsi_host_new': (ctypes.c_int32, [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_host)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_status': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_free': (None, [ctypes.POINTER(kcsi_host)]),
    'kcsi_host_metrics': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_validate_plugin': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_register_plugin': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, ctypes.c_int64, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_deregister_plugin': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_list_drivers': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_get_volume_name': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_can_support': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.c_bool), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_can_attach': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.c_bool), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_driver_attach_required': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.c_bool), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_csidriver_generation': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.POINTER(ctypes.POINTER(ctypes.c_uint64)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_csidriver_apply': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_csidriver_delete': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_csidrivers_synced': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_volumeattachment_apply': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_volumeattachment_delete': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_host_volumeattachments_synced': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_can_device_mount': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.c_bool), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_requires_remount': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.c_bool), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_supports_selinux_context_mount': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.c_bool), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_new': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.POINTER(ctypes.POINTER(kcsi_attacher)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_wait_for_attach': (ctypes.c_int32, [ctypes.POINTER(kcsi_attacher), ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_device_mount_path': (ctypes.c_int32, [ctypes.POINTER(kcsi_attacher), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_mount_device': (ctypes.c_int32, [ctypes.POINTER(kcsi_attacher), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_unmount_device': (ctypes.c_int32, [ctypes.POINTER(kcsi_attacher), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_attach': (ctypes.c_int32, [ctypes.POINTER(kcsi_attacher), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_detach': (ctypes.c_int32, [ctypes.POINTER(kcsi_attacher), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_volumes_are_attached': (ctypes.c_int32, [ctypes.POINTER(kcsi_attacher), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_attacher_free': (None, [ctypes.POINTER(kcsi_attacher)]),
    'kcsi_verify_exhausted_resource': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.c_bool), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_list_device_mounts': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_unmount_device_by_handle': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_mounter_new': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_mounter)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_mounter_path': (ctypes.c_int32, [ctypes.POINTER(kcsi_mounter), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_mounter_set_up': (ctypes.c_int32, [ctypes.POINTER(kcsi_mounter), ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_mounter_metrics': (ctypes.c_int32, [ctypes.POINTER(kcsi_mounter), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_mounter_free': (None, [ctypes.POINTER(kcsi_mounter)]),
    'kcsi_unmounter_new': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_unmounter)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_unmounter_tear_down': (ctypes.c_int32, [ctypes.POINTER(kcsi_unmounter), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_unmounter_free': (None, [ctypes.POINTER(kcsi_unmounter)]),
    'kcsi_block_mapper_new': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_block_mapper)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_block_mapper_paths': (ctypes.c_int32, [ctypes.POINTER(kcsi_block_mapper), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_block_mapper_set_up_device': (ctypes.c_int32, [ctypes.POINTER(kcsi_block_mapper), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_block_mapper_map_pod_device': (ctypes.c_int32, [ctypes.POINTER(kcsi_block_mapper), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_block_mapper_metrics': (ctypes.c_int32, [ctypes.POINTER(kcsi_block_mapper), ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_block_mapper_free': (None, [ctypes.POINTER(kcsi_block_mapper)]),
    'kcsi_block_unmapper_new': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_block_unmapper)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_block_unmapper_unmap_pod_device': (ctypes.c_int32, [ctypes.POINTER(kcsi_block_unmapper), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_block_unmapper_tear_down_device': (ctypes.c_int32, [ctypes.POINTER(kcsi_block_unmapper), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_block_unmapper_free': (None, [ctypes.POINTER(kcsi_block_unmapper)]),
    'kcsi_node_expand': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.POINTER(ctypes.c_bool), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_construct_volume_spec': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_construct_block_volume_spec': (ctypes.c_int32, [ctypes.POINTER(kcsi_host), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)), ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
    'kcsi_set_log_callback': (ctypes.c_int32, [kcsi_log_fn, ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.POINTER(kcsi_error))]),
}


def apply(lib):
    """Sets restype and argtypes of every header function the library exports; returns the
    names the library lacks (an older build than the header)."""
    missing = []
    for name, (restype, argtypes) in CTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    return missing
