"""kcsi_list_device_mounts and kcsi_unmount_device_by_handle through the generated binding."""
import hashlib
import os
import typing

import pytest

import kcsi
from conftest import assert_shape


def test_list_device_mounts_reports_a_global_mount_without_volume_data(host):
    assert host.list_device_mounts() == []
    sha = hashlib.sha256(b"vol-1").hexdigest()
    gm = os.path.join(host.root, "plugins/kubernetes.io/csi/example.com/drv", sha, "globalmount")
    os.makedirs(gm)
    mounts = host.list_device_mounts()
    assert_shape(mounts, typing.List[kcsi.DeviceMount])
    [m] = mounts
    assert (m["kind"], m["driver"], m["deviceMountPath"], m["volumeData"], m["mounted"]) == (
        "filesystem", "example.com/drv", gm, None, False)
    assert "No such file" in m["volumeDataError"]


def test_unmount_device_by_handle_refuses_unknown_driver_and_bad_names(host):
    with pytest.raises(kcsi.NotFound) as e:
        host.unmount_device_by_handle("not.registered", "vol-1")
    assert e.value.is_transient
    with pytest.raises(kcsi.InvalidArgument):
        host.unmount_device_by_handle("../escape", "vol-1")
    with pytest.raises(kcsi.InvalidArgument):
        host.unmount_device_by_handle(None, "vol-1")
