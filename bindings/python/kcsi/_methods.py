"""Explicit methods of the handle classes, GENERATED from include/kcsi.h by
bindings/python/gen_signatures.py. Do not edit. Each method calls the C function its docstring
names with the conventions of kcsi.call (JSON parameters take dicts, outputs are returned).
"""
# fmt: off
from typing import Any, List, Optional, Sequence

from ._types import BlockMapperPaths, DeviceMount, DriverInfo, HostStatus, Json, Text, VolumeMetrics, old_names


class _AttacherMethods:
    __slots__ = ()

    @old_names(spec_json='spec')
    def wait_for_attach(self, spec: Json, timeout_ms: int = 0) -> str:
        """Checks once that the volume's VolumeAttachment (`csi-<sha256(handle+driver+node)>`) is
        attached, and returns its name. Not attached yet or unreadable: transient; attach error
        (its message verbatim) or being deleted: final. `timeout_ms <= 0`: the host's timeout. A
        plain spec with a `publishContext` counts as attached without a read.

        C function: kcsi_attacher_wait_for_attach."""
        return self._invoke('kcsi_attacher_wait_for_attach', (spec, timeout_ms))

    @old_names(spec_json='spec')
    def device_mount_path(self, spec: Json) -> str:
        """The global (staging) mount path of a PersistentVolume spec:
        `<rootDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`.

        C function: kcsi_attacher_device_mount_path."""
        return self._invoke('kcsi_attacher_device_mount_path', (spec,))

    @old_names(spec_json='spec', args_json='args')
    def mount_device(self, spec: Json, device_mount_path: Text, args: Optional[Json] = None) -> None:
        """MountDevice: creates `device_mount_path` (mode 0750), records `vol_data.json` next to it
        and, when the driver has STAGE_UNSTAGE_VOLUME, calls NodeStageVolume there. `args`
        (optional): `{"fsGroup": int, "seLinuxLabel": string}`. Errors are classed as the
        kubelet's: uncertain when the driver may still be staging, transient when nothing
        changed.

        C function: kcsi_attacher_mount_device."""
        return self._invoke('kcsi_attacher_mount_device', (spec, device_mount_path, args))

    def unmount_device(self, device_mount_path: Text) -> None:
        """UnmountDevice: NodeUnstageVolume (when the driver has STAGE_UNSTAGE_VOLUME) with what
        the `vol_data.json` next to `device_mount_path` recorded, then removes the global mount
        dir. Succeeds without NodeUnstageVolume when that file is missing (as upstream),
        removing the global dir only when it holds nothing but kcsi's temp files (an interrupted
        MountDevice or UnmountDevice); a `globalmount` there is kept for
        `Host.list_device_mounts` and `Host.unmount_device_by_handle`. A corrupt file is an
        error. A symlink below the root on the way is `kcsi.FailedPrecondition`, and nothing is
        done.

        C function: kcsi_attacher_unmount_device."""
        return self._invoke('kcsi_attacher_unmount_device', (device_mount_path,))

    @old_names(spec_json='spec')
    def attach(self, spec: Json, node_name: Text, timeout_ms: int = 0) -> str:
        """Controller hosts only (`"role": "controller"`). Attach: creates the VolumeAttachment
        `csi-<sha256(handle+driver+node)>` for a PersistentVolume spec on `node_name` (its
        `spec.source` the PV's name, or with `"inlineVolumeSpecForCSIMigration": true` the PV's
        spec; one that exists is kept) and waits on the host's watch until the external-attacher
        sets `status.attached` (the name is returned) or `status.attachError` (final
        `kcsi.Driver`, its message verbatim, its `errorCode` as the gRPC code), or until
        `timeout_ms` passes (transient `kcsi.Timeout`, "timed out waiting for external-attacher
        of <driver> CSI driver to attach volume <handle>"). `timeout_ms <= 0`: the host's
        timeout. On a node host: `kcsi.NotSupported` ("attaching volumes from the kubelet is not
        supported").

        C function: kcsi_attacher_attach."""
        return self._invoke('kcsi_attacher_attach', (spec, node_name, timeout_ms))

    def detach(self, volume_name: Text, node_name: Text, timeout_ms: int = 0) -> None:
        """Controller hosts only. Detach: `volume_name` is `<driver>^<handle>` (what
        `Host.get_volume_name` returns); deletes that volume's VolumeAttachment on `node_name`
        and waits until it is gone (the external-attacher called ControllerUnpublishVolume).
        `status.detachError` is a final `kcsi.Driver`; an attachment that does not exist
        succeeds; the timeout is a transient `kcsi.Timeout`. `timeout_ms <= 0`: the host's
        timeout.

        C function: kcsi_attacher_detach."""
        return self._invoke('kcsi_attacher_detach', (volume_name, node_name, timeout_ms))

    @old_names(specs_json='specs')
    def volumes_are_attached(self, specs: Json, node_name: Text) -> List[bool]:
        """Controller hosts only. VolumesAreAttached: `specs` is a list of PersistentVolume specs;
        returns a list of booleans in the same order: whether each volume's VolumeAttachment on
        `node_name` has `status.attached`, read from the host's watch (a GET when the watch
        lacks it). A driver whose CSIDriver says `attachRequired: false` is attached; a failed
        lookup is not.

        C function: kcsi_attacher_volumes_are_attached."""
        return self._invoke('kcsi_attacher_volumes_are_attached', (specs, node_name))


class _BlockMapperMethods:
    __slots__ = ()

    def paths(self) -> BlockMapperPaths:
        """The mapper's paths as a dict: `{"globalMapPath", "stagingPath", "publishDir",
        "publishPath", "podDeviceMapPath", "podDeviceMapName", "volumeDataDir", "metricsPath"}`.

        C function: kcsi_block_mapper_paths."""
        return self._invoke('kcsi_block_mapper_paths', ())

    def set_up_device(self) -> str:
        """SetUpDevice: NodeStageVolume with block access at the staging path, when the driver has
        STAGE_UNSTAGE_VOLUME. Returns the staging path, or "" when the driver does not stage. A
        final error removes the volume's files (vol_data.json included).

        C function: kcsi_block_mapper_set_up_device."""
        return self._invoke('kcsi_block_mapper_set_up_device', ())

    def map_pod_device(self) -> str:
        """MapPodDevice: NodePublishVolume with block access; the driver creates the device file at
        the publish path, returned.

        C function: kcsi_block_mapper_map_pod_device."""
        return self._invoke('kcsi_block_mapper_map_pod_device', ())

    def metrics(self) -> VolumeMetrics:
        """The mapped block volume's usage from NodeGetVolumeStats on `<globalMapPath>/<podUID>`,
        in `Mounter.metrics`' form. `kcsi.NotSupported` when the driver lacks GET_VOLUME_STATS.

        C function: kcsi_block_mapper_metrics."""
        return self._invoke('kcsi_block_mapper_metrics', ())


class _BlockUnmapperMethods:
    __slots__ = ()

    def unmap_pod_device(self) -> None:
        """UnmapPodDevice: NodeUnpublishVolume of the pod's publish path. Needs an unmapper made
        with a pod UID.

        C function: kcsi_block_unmapper_unmap_pod_device."""
        return self._invoke('kcsi_block_unmapper_unmap_pod_device', ())

    def tear_down_device(self, global_map_path: Optional[Text] = None, device_path: Optional[Text] = None) -> None:
        """TearDownDevice: NodeUnstageVolume when the staging path exists, then removal of the
        volume's leftover files without crossing a mount point. `global_map_path` and
        `device_path` (either may be None) are only logged, as upstream only logs them.

        C function: kcsi_block_unmapper_tear_down_device."""
        return self._invoke('kcsi_block_unmapper_tear_down_device', (global_map_path, device_path))


class _HostMethods:
    __slots__ = ()

    def status(self) -> HostStatus:
        """The host's status as a dict: `{"csiNodeInitialized", "lastError", "drivers", ...,
        "pluginWatcher"}`. `pluginWatcher` is None unless configured, else `{"dir",
        "socketsSeen", "lastError", "sockets": [{"path", "state", "driver", "endpoint",
        "attempts", "lastError"}]}` with `state` one of `registering`, `registered` or
        `retrying` (failed, tried again with backoff).

        C function: kcsi_host_status."""
        return self._invoke('kcsi_host_status', ())

    def metrics(self) -> str:
        """The host's metrics in the Prometheus text exposition format (version 0.0.4), ready to
        serve on a `/metrics` endpoint: `csi_operations_seconds` (as upstream's kubelet: labels
        `driver_name`, `method_name`, `grpc_status_code`, `migrated`), and kcsi's own
        `kcsi_driver_registrations_total`, `kcsi_registered_drivers`, `kcsi_api_requests_total`.
        Each host has its own registry.

        C function: kcsi_host_metrics."""
        return self._invoke('kcsi_host_metrics', ())

    def validate_plugin(self, name: Text, endpoint: Text, versions: Sequence[Text]) -> None:
        """Checks a driver's name, endpoint and supported versions as the kubelet's
        `ValidatePlugin` does, without registering anything. `versions` is a list of strings.

        C function: kcsi_validate_plugin."""
        return self._invoke('kcsi_validate_plugin', (name, endpoint, versions))

    def register_plugin(self, name: Text, endpoint: Text, versions: Sequence[Text], timeout_ms: int = 0) -> None:
        """Registers a CSI driver as the kubelet's `RegisterPlugin` does: stores it, calls
        `NodeGetInfo` over its socket and publishes the node info (with a kubeconfig: Node and
        CSINode). Any failure rolls the registration back. Blocks for at most `timeout_ms`
        milliseconds (`<= 0`: the host's timeout).

        C function: kcsi_register_plugin."""
        return self._invoke('kcsi_register_plugin', (name, endpoint, versions, timeout_ms))

    def deregister_plugin(self, name: Text) -> None:
        """Deregisters a CSI driver as the kubelet's `DeRegisterPlugin` does and removes its node
        info. `kcsi.NotFound` when no driver of that name is registered (node info is still
        cleaned up).

        C function: kcsi_deregister_plugin."""
        return self._invoke('kcsi_deregister_plugin', (name,))

    def list_drivers(self) -> List[DriverInfo]:
        """The registered drivers as a list of `{"name", "endpoint", "highestSupportedVersion",
        "nodeId", "maxVolumesPerNode", "topology"}`, sorted by name.

        C function: kcsi_list_drivers."""
        return self._invoke('kcsi_list_drivers', ())

    @old_names(spec_json='spec')
    def get_volume_name(self, spec: Json) -> str:
        """The unique volume name `<driver>^<volumeHandle>` of a PersistentVolume spec (inline
        volumes have none: `kcsi.InvalidArgument`).

        C function: kcsi_get_volume_name."""
        return self._invoke('kcsi_get_volume_name', (spec,))

    @old_names(spec_json='spec')
    def can_support(self, spec: Json) -> bool:
        """Whether the spec has a CSI source (PV or inline).

        C function: kcsi_can_support."""
        return self._invoke('kcsi_can_support', (spec,))

    @old_names(spec_json='spec')
    def can_attach(self, spec: Json) -> bool:
        """Whether the volume needs attaching: false for inline volumes and for drivers whose
        CSIDriver says `attachRequired: false`; true when no CSIDriver exists.

        C function: kcsi_can_attach."""
        return self._invoke('kcsi_can_attach', (spec,))

    def driver_attach_required(self, driver_name: Text) -> bool:
        """`Host.can_attach` for a PersistentVolume of `driver_name`, without a spec to encode and
        parse: whether the driver's CSIDriver says `attachRequired` (true when none exists). For
        a caller that asks it of every volume in a loop, as the kubelet's reconciler does every
        100 ms.

        C function: kcsi_driver_attach_required."""
        return self._invoke('kcsi_driver_attach_required', (driver_name,))

    def csidriver_generation(self) -> Any:
        """A counter kcsi increments after every change to the CSIDriver objects its driver facts
        (`Host.driver_attach_required`, `Host.can_attach`, `Host.requires_remount`, ...) come
        from: the API server's, watched or fed by the program (`Host.csidriver_apply`), or the
        host config's, which never change. Returns a ctypes pointer to it, valid until the host
        is closed (`.contents.value` reads it). kcsi moves it once its answers reflect a change,
        so an answer cached together with the value read before asking is replaced as soon as
        the value moves: a caller that asks the same query of every volume in a loop may answer
        from its cache.

        C function: kcsi_host_csidriver_generation."""
        return self._invoke('kcsi_host_csidriver_generation', ())

    @old_names(csidriver_json='csidriver')
    def csidriver_apply(self, csidriver: Json) -> None:
        """On a host made with `"csiDriversFromHost": true`: a CSIDriver object (JSON, as the API
        server serves it) that the program's own informer added or updated. kcsi then sends no
        CSIDriver list or watch of its own; its driver facts and `Host.csidriver_generation`
        follow what the program feeds. `kcsi.FailedPrecondition` on other hosts.

        C function: kcsi_host_csidriver_apply."""
        return self._invoke('kcsi_host_csidriver_apply', (csidriver,))

    def csidriver_delete(self, name: Text) -> None:
        """On a `"csiDriversFromHost"` host: the CSIDriver `name` was deleted. `kcsi.NotFound` when
        kcsi had no such object (nothing changes).

        C function: kcsi_host_csidriver_delete."""
        return self._invoke('kcsi_host_csidriver_delete', (name,))

    def csidrivers_synced(self) -> None:
        """On a `"csiDriversFromHost"` host: the program's informer has synced, every CSIDriver it
        listed has been applied. Until then a driver-facts lookup on a caller's thread waits up
        to 5 s for it and then fails with a transient `kcsi.Unavailable`, as before kcsi's own
        first list.

        C function: kcsi_host_csidrivers_synced."""
        return self._invoke('kcsi_host_csidrivers_synced', ())

    @old_names(volumeattachment_json='volumeattachment')
    def volumeattachment_apply(self, volumeattachment: Json) -> None:
        """On a controller host made with `"volumeAttachmentsFromHost": true`: a VolumeAttachment
        (JSON, as the API server serves it) that the program's informer (the attach/detach
        controller's) added or updated. kcsi then sends no VolumeAttachment list or watch of its
        own: Attach and Detach wait on, and VolumesAreAttached reads, what the program feeds, so
        the program feeds the attachment an Attach or Detach waits on while the call runs.
        `kcsi.FailedPrecondition` on other hosts.

        C function: kcsi_host_volumeattachment_apply."""
        return self._invoke('kcsi_host_volumeattachment_apply', (volumeattachment,))

    def volumeattachment_delete(self, name: Text) -> None:
        """On a `"volumeAttachmentsFromHost"` host: the VolumeAttachment `name` is gone.
        `kcsi.NotFound` when kcsi had no such object (nothing changes).

        C function: kcsi_host_volumeattachment_delete."""
        return self._invoke('kcsi_host_volumeattachment_delete', (name,))

    def volumeattachments_synced(self) -> None:
        """On a `"volumeAttachmentsFromHost"` host: the program's informer has synced. Until then
        kcsi does not trust a VolumeAttachment's absence from what was fed: Attach creates it
        (AlreadyExists tolerated) and VolumesAreAttached asks the API server.

        C function: kcsi_host_volumeattachments_synced."""
        return self._invoke('kcsi_host_volumeattachments_synced', ())

    @old_names(spec_json='spec')
    def can_device_mount(self, spec: Json) -> bool:
        """Whether the volume is device-mounted (staged): true for PersistentVolumes, false for
        inline volumes.

        C function: kcsi_can_device_mount."""
        return self._invoke('kcsi_can_device_mount', (spec,))

    @old_names(spec_json='spec')
    def requires_remount(self, spec: Json) -> bool:
        """Whether the volume must be re-published periodically (the CSIDriver's
        `requiresRepublish`); false when the driver has no CSIDriver object.

        C function: kcsi_requires_remount."""
        return self._invoke('kcsi_requires_remount', (spec,))

    @old_names(spec_json='spec')
    def supports_selinux_context_mount(self, spec: Json) -> bool:
        """Whether the volume may be mounted with `-o context=<label>` (the kubelet's
        `SupportsSELinuxContextMount`): with the gate `SELinuxMountReadWriteOncePod`, the
        CSIDriver's `seLinuxMount` (false when the driver has no CSIDriver object); false
        without the gate. A spec without a CSI source is `kcsi.InvalidArgument`.

        C function: kcsi_supports_selinux_context_mount."""
        return self._invoke('kcsi_supports_selinux_context_mount', (spec,))

    def attacher(self) -> 'Attacher':
        """Creates an attacher for this host. Returns an `Attacher` (close it, or use it in a
        `with` block).

        C function: kcsi_attacher_new."""
        return self._invoke('kcsi_attacher_new', ())
    attacher_new = attacher

    @old_names(spec_json='spec')
    def verify_exhausted_resource(self, spec: Json) -> bool:
        """Whether a PersistentVolume's attach failed because the node has no capacity left for its
        driver: its VolumeAttachment's `attachError.errorCode` is gRPC ResourceExhausted (8). If
        so, the driver's CSINode `allocatable.count` is refreshed from `NodeGetInfo` before True
        is returned. Only drivers whose CSIDriver sets `nodeAllocatableUpdatePeriodSeconds` take
        part (gate `MutableCSINodeAllocatableCount`); a lookup that fails, a standalone host or
        an inline volume answer false (logged), as upstream. Call it when a pod's volumes stay
        unattached.

        C function: kcsi_verify_exhausted_resource."""
        return self._invoke('kcsi_verify_exhausted_resource', (spec,))

    def list_device_mounts(self) -> List[DeviceMount]:
        """The device mounts (staged volumes) below `<rootDir>/plugins/kubernetes.io/csi` as a list
        sorted by path, one object per global mount dir
        (`<driver>/<sha256(handle)>/globalmount`, `"kind": "filesystem"`) and per block volume
        (its staging path `volumeDevices/staging/<spec>`, also when only its
        `volumeDevices/<spec>/data` is left; `"kind": "block"`): `{"kind", "driver",
        "volumeHandle", "specName", "deviceMountPath", "mounted", "volumeDataFile",
        "volumeData", "volumeDataError"}`. `volumeData` is the file's keys, or None with
        `volumeDataError` saying why (missing, corrupt); `driver` of a filesystem entry comes
        from its path, so it is known even without the file. Symlinks are skipped, never
        followed.

        C function: kcsi_list_device_mounts."""
        return self._invoke('kcsi_list_device_mounts', ())

    def unmount_device_by_handle(self, driver: Text, volume_handle: Text) -> None:
        """UnmountDevice of the volume `volume_handle` of `driver`, for when its `vol_data.json`
        may be gone: NodeUnstageVolume (when the driver has STAGE_UNSTAGE_VOLUME) at
        `<rootDir>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`, then
        removal of the global mount dir, as `Attacher.unmount_device`. A `vol_data.json` that is
        there but names another driver or handle is `kcsi.FailedPrecondition`; an unregistered
        driver is `kcsi.NotFound` (transient). When there is no such global mount dir but a
        block volume (`Host.list_device_mounts`' `"kind": "block"`) records the driver and
        handle, that volume is torn down as `BlockUnmapper.tear_down_device` does.

        C function: kcsi_unmount_device_by_handle."""
        return self._invoke('kcsi_unmount_device_by_handle', (driver, volume_handle))

    @old_names(spec_json='spec', pod_json='pod')
    def mounter(self, spec: Json, pod: Json) -> 'Mounter':
        """Creates a mounter for `spec` (`{"persistentVolume": <PV>, "readOnly": bool}`,
        `{"volume": <Volume>}`, or the plain form below) in the pod `pod` (a core/v1 Pod;
        `metadata.uid` required). Does no I/O and needs no registered driver. Unsafe pod UIDs or
        volume names are `kcsi.InvalidArgument`. Returns a `Mounter` (close it, or use it in a
        `with` block). Plain form, for hosts without Kubernetes objects (every call that takes
        `spec` accepts it): `{"csi": {"driver", "volumeHandle", "specName", "volumeAttributes":
        {..}, "accessMode": "ReadWriteOnce", "volumeMode": "Filesystem"|"Block", "fsType",
        "mountOptions": [..], "readOnly": bool, "nodeStageSecrets"/"nodePublishSecrets"/
        "nodeExpandSecrets": {..} or "secretsFile": "/abs/path.json", "publishContext": {..}},
        "readOnly": bool}`. It acts as the PersistentVolume named `specName` with that CSI
        source (same paths, same `vol_data.json`). The secrets file uses csi-sanity's keys
        (`{"NodeStageVolumeSecret": {..}, "NodePublishVolumeSecret": {..}, ...}`) and is read at
        each operation (unreadable: transient). `publishContext` stands in for the
        VolumeAttachment when the CSIDriver requires attach.

        C function: kcsi_mounter_new."""
        return self._invoke('kcsi_mounter_new', (spec, pod))
    mounter_new = mounter

    def unmounter(self, spec_name: Text, pod_uid: Text) -> 'Unmounter':
        """Creates an unmounter for the volume `spec_name` of pod `pod_uid` from the
        `vol_data.json` its SetUp wrote (so it works after a restart, with a new host). A
        missing file is `kcsi.NotFound` — unless the volume dir holds only kcsi's temp files (an
        interrupted SetUp or TearDown): then the unmounter's tear-down just removes them. A
        corrupt file is `kcsi.Io`; unsafe names `kcsi.InvalidArgument`; a symlink below the root
        on the way `kcsi.FailedPrecondition`. Returns an `Unmounter` (close it, or use it in a
        `with` block).

        C function: kcsi_unmounter_new."""
        return self._invoke('kcsi_unmounter_new', (spec_name, pod_uid))
    unmounter_new = unmounter

    @old_names(spec_json='spec', pod_json='pod')
    def block_mapper(self, spec: Json, pod: Json) -> 'BlockMapper':
        """Creates a block mapper for a `volumeMode: Block` PersistentVolume (or plain) spec and a
        pod (core/v1 Pod JSON with `metadata.uid`), and writes
        `<rootDir>/plugins/kubernetes.io/csi/volumeDevices/<spec>/data/vol_data.json`. Returns a
        `BlockMapper` (close it, or use it in a `with` block).

        C function: kcsi_block_mapper_new."""
        return self._invoke('kcsi_block_mapper_new', (spec, pod))
    block_mapper_new = block_mapper

    def block_unmapper(self, spec_name: Text, pod_uid: Text) -> 'BlockUnmapper':
        """Creates a block unmapper from the volume's `data/vol_data.json`. `pod_uid` may be "" to
        only tear the device down (the kubelet's UnmountDevice has no pod). A missing file is
        `kcsi.NotFound`, unless an interrupted teardown left only kcsi's temp files (no staging
        path): then the handle's teardown just removes them. Returns a `BlockUnmapper` (close
        it, or use it in a `with` block).

        C function: kcsi_block_unmapper_new."""
        return self._invoke('kcsi_block_unmapper_new', (spec_name, pod_uid))
    block_unmapper_new = block_unmapper

    @old_names(options_json='options')
    def node_expand(self, options: Json) -> bool:
        """Expands a volume on this node (NodeExpandVolume). `options`: `{"spec": <spec>,
        "devicePath", "deviceMountPath", "deviceStagePath", "newSize": "<quantity>", "oldSize":
        "<quantity>"}`; block volumes (`volumeMode: Block`) are expanded at `devicePath`, others
        at `deviceMountPath`. Returns True on success. A driver without EXPAND_VOLUME gives
        `kcsi.NotSupported` (the volume was not resized). The driver's gRPC code stays on the
        error: FailedPrecondition (in use) and InvalidArgument / OutOfRange / NotFound
        (infeasible) are final; codes that may still be in progress are uncertain.

        C function: kcsi_node_expand."""
        return self._invoke('kcsi_node_expand', (options,))

    def construct_volume_spec(self, volume_name: Text, mount_path: Text) -> Any:
        """Rebuilds the spec of a mounted volume from `<mount_path>/vol_data.json`, `mount_path`
        being the per-volume dir `<rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<spec>`
        (anything outside `<rootDir>/pods/` is `kcsi.InvalidArgument`). Returns `{"spec": <spec
        as the other calls take it>, "seLinuxMountContext": "<label or empty>"}`: a
        PersistentVolume (volumeMode Filesystem) with driver and handle, or for an ephemeral
        volume an inline Volume with its driver. A missing file is `kcsi.NotFound`.

        C function: kcsi_construct_volume_spec."""
        return self._invoke('kcsi_construct_volume_spec', (volume_name, mount_path))

    def construct_block_volume_spec(self, pod_uid: Text, spec_name: Text, map_path: Text) -> Any:
        """Rebuilds a block volume's spec after a restart from its `data/vol_data.json`:
        `{"persistentVolume": <PV with name, csi.driver, csi.volumeHandle, volumeMode Block>,
        "readOnly": false}`. `pod_uid` and `map_path` are only logged.

        C function: kcsi_construct_block_volume_spec."""
        return self._invoke('kcsi_construct_block_volume_spec', (pod_uid, spec_name, map_path))


class _MounterMethods:
    __slots__ = ()

    def path(self) -> str:
        """The mount path the volume is published at:
        `<rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<spec>/mount`.

        C function: kcsi_mounter_path."""
        return self._invoke('kcsi_mounter_path', ())

    @old_names(args_json='args')
    def set_up(self, args: Optional[Json] = None) -> None:
        """Publishes the volume (the kubelet's `SetUp`): NodePublishVolume into the mount path,
        with `vol_data.json` written beside it. `args` (optional): `{"fsGroup": int,
        "fsGroupChangePolicy": "Always"|"OnRootMismatch", "seLinuxLabel": string,
        "reconstructedVolume": bool, "isRemount": bool}`, all optional, unknown keys rejected.
        Errors carry the class the kubelet acts on: transient (driver not registered, Kubernetes
        lookups), uncertain (the driver may still be publishing), or final (then the directory
        is removed unless something is mounted on it, or the volume is a reconstructed one or a
        remount, which a pod may already use). A symlink anywhere below the root on the way to
        the mount path is refused (`kcsi.FailedPrecondition`, naming it) before anything is
        written there or sent to the driver. Concurrent calls on the same volume run one after
        the other.

        C function: kcsi_mounter_set_up."""
        return self._invoke('kcsi_mounter_set_up', (args,))

    def metrics(self) -> VolumeMetrics:
        """The published volume's usage from NodeGetVolumeStats as a dict: `{"time",
        "capacityBytes", "availableBytes", "usedBytes", "inodes", "inodesFree", "inodesUsed"}`,
        plus `"abnormal"` and `"message"` when the gate `CSIVolumeHealth` is on and the driver
        reports volume conditions. `kcsi.NotSupported` when the driver lacks GET_VOLUME_STATS.

        C function: kcsi_mounter_metrics."""
        return self._invoke('kcsi_mounter_metrics', ())


class _UnmounterMethods:
    __slots__ = ()

    def tear_down(self) -> None:
        """Tears the volume down (the kubelet's `TearDown`): NodeUnpublishVolume, then removes the
        mount dir and `vol_data.json` unless the target is still mounted. A driver that is not
        registered is transient; a failed NodeUnpublishVolume is final.

        C function: kcsi_unmounter_tear_down."""
        return self._invoke('kcsi_unmounter_tear_down', ())
