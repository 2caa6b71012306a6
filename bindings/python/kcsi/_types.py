"""The types the generated methods (`_methods.py`) take and return, and their keyword-alias
decorator. The result dicts are `TypedDict`s: at run time plain dicts, to a type checker the
keys and value types kcsi writes (the keys are JSON's camelCase, as kcsi returns them)."""
import functools
from typing import Dict, List, Literal, Optional, TypedDict, Union

# A JSON parameter: a dict or list (encoded), or JSON text as str or bytes.
Json = Union[dict, list, str, bytes]
# A string parameter: str (sent as UTF-8) or bytes.
Text = Union[str, bytes]


class DriverInfo(TypedDict):
    """A registered driver (`Host.list_drivers`, `HostStatus["drivers"]`); the node fields are
    None until its NodeGetInfo answered."""
    name: str
    endpoint: str
    highestSupportedVersion: str
    nodeId: Optional[str]
    maxVolumesPerNode: Optional[int]
    topology: Optional[Dict[str, str]]


class PluginSocket(TypedDict):
    """One registration socket the plugin watcher found."""
    path: str
    state: Literal["registering", "registered", "retrying"]
    driver: Optional[str]
    endpoint: Optional[str]
    attempts: int
    lastError: Optional[str]


class PluginWatcherStatus(TypedDict):
    dir: str
    socketsSeen: int
    lastError: Optional[str]
    sockets: List[PluginSocket]


class HostStatus(TypedDict):
    """`Host.status()`. The API-server fields (`csiDriversSynced`, `volumeAttachmentsSynced`,
    `apiRequests`) are None on a standalone host; `pluginWatcher` is None unless configured."""
    role: Literal["node", "controller"]
    nodeName: Optional[str]
    standalone: bool
    csiNodeInitialized: bool
    lastError: Optional[str]
    csiDriversSynced: Optional[bool]
    volumeAttachmentsSynced: Optional[bool]
    apiRequests: Optional[int]
    drivers: List[DriverInfo]
    pluginWatcher: Optional[PluginWatcherStatus]


class BlockMapperPaths(TypedDict):
    """`BlockMapper.paths()`: where the block volume is staged, published and mapped."""
    globalMapPath: str
    stagingPath: str
    publishDir: str
    publishPath: str
    podDeviceMapPath: str
    podDeviceMapName: str
    volumeDataDir: str
    metricsPath: str


class _VolumeUsage(TypedDict):
    time: str
    capacityBytes: int
    availableBytes: int
    usedBytes: int
    inodes: int
    inodesFree: int
    inodesUsed: int


class VolumeMetrics(_VolumeUsage, total=False):
    """`Mounter.metrics()`, `BlockMapper.metrics()`: NodeGetVolumeStats' usage (`time` is
    RFC 3339); `abnormal` and `message` only with the gate CSIVolumeHealth and a driver that
    reports volume conditions."""
    abnormal: bool
    message: str


class DeviceMount(TypedDict):
    """One staged volume (`Host.list_device_mounts`). `volumeData` is its vol_data.json, or
    None with `volumeDataError` saying why."""
    kind: Literal["filesystem", "block"]
    driver: Optional[str]
    volumeHandle: Optional[str]
    specName: Optional[str]
    deviceMountPath: str
    mounted: bool
    volumeDataFile: str
    volumeData: Optional[Dict[str, str]]
    volumeDataError: Optional[str]


def old_names(**renamed):
    """Lets a method also take its parameters' C names (`spec_json=` for `spec=`) as keywords."""
    def wrap(method):
        @functools.wraps(method)
        def with_old_names(self, *args, **kwargs):
            for old, new in renamed.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{method.__name__}() got both {new!r} and its old name {old!r}")
                    kwargs[new] = kwargs.pop(old)
            return method(self, *args, **kwargs)
        return with_old_names
    return wrap
