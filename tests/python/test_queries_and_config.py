"""Plugin queries and host configuration, through libkcsi.so."""
import json

import pytest

import kcsi
from conftest import csi_driver, inline_spec, pv_spec

DRIVER = "q.csi.example.com"


def test_get_volume_name_is_driver_caret_handle(host):
    assert host.get_volume_name(pv_spec(DRIVER, handle="vol-42")) == f"{DRIVER}^vol-42"


def test_get_volume_name_rejects_inline_volume(host):
    with pytest.raises(kcsi.InvalidArgument):
        host.get_volume_name(inline_spec(DRIVER))


def test_get_volume_name_accepts_json_text(host):
    assert host.get_volume_name(json.dumps(pv_spec(DRIVER, handle="h"))) == f"{DRIVER}^h"


def test_can_support_pv_and_inline_csi_but_not_other_volumes(host):
    assert host.can_support(pv_spec(DRIVER)) is True
    assert host.can_support(inline_spec(DRIVER)) is True
    assert host.can_support({"volume": {"name": "e", "emptyDir": {}}}) is False


def test_can_attach_true_without_csidriver_object(host):
    assert host.can_attach(pv_spec(DRIVER)) is True


def test_can_attach_false_for_inline_volume(host):
    assert host.can_attach(inline_spec(DRIVER)) is False


def test_can_attach_follows_standalone_csidriver_attach_required(make_host):
    h = make_host(csiDrivers=[csi_driver(DRIVER, attachRequired=False),
                              csi_driver("b.csi.example.com", attachRequired=True)])
    assert h.can_attach(pv_spec(DRIVER)) is False
    assert h.can_attach(pv_spec("b.csi.example.com")) is True


def test_driver_attach_required_answers_as_can_attach_of_its_pvs(make_host):
    h = make_host(csiDrivers=[csi_driver(DRIVER, attachRequired=False)])
    for driver in (DRIVER, "no-csidriver.example.com"):
        assert h.driver_attach_required(driver) is h.can_attach(pv_spec(driver))
    assert h.driver_attach_required("no-csidriver.example.com") is True
    with pytest.raises(kcsi.KcsiError) as e:
        h.driver_attach_required("")
    assert e.value.result == kcsi.KCSI_ERR_INVALID_ARGUMENT


def test_csidriver_generation_of_a_config_host_stays_zero(make_host):
    h = make_host(csiDrivers=[csi_driver(DRIVER, attachRequired=False)])
    counter = h.csidriver_generation()
    assert counter.contents.value == 0
    h.driver_attach_required(DRIVER)
    assert h.csidriver_generation().contents.value == 0


def test_can_device_mount_true_for_pv_false_for_inline(host):
    assert host.can_device_mount(pv_spec(DRIVER)) is True
    assert host.can_device_mount(inline_spec(DRIVER)) is False


def test_requires_remount_follows_standalone_csidriver(make_host):
    h = make_host(csiDrivers=[csi_driver(DRIVER, requiresRepublish=True)])
    assert h.requires_remount(pv_spec(DRIVER)) is True
    assert h.requires_remount(pv_spec("other.csi.example.com")) is False


def test_requires_remount_false_without_csidriver(host):
    assert host.requires_remount(pv_spec(DRIVER)) is False


# ------------------------------------------------------------------------- host configuration

def test_host_config_rejects_unknown_key_naming_it(tmp_path):
    with pytest.raises(kcsi.InvalidArgument) as e:
        kcsi.Host({"nodeName": "n", "rootDir": str(tmp_path), "bogusKey": 1})
    assert "bogusKey" in e.value.message


def test_host_config_requires_node_name(tmp_path):
    with pytest.raises(kcsi.InvalidArgument) as e:
        kcsi.Host({"rootDir": str(tmp_path)})
    assert "nodeName" in e.value.message


def test_host_config_requires_root_dir():
    with pytest.raises(kcsi.InvalidArgument) as e:
        kcsi.Host({"nodeName": "n"})
    assert "rootDir" in e.value.message


def test_host_config_rejects_relative_root_dir():
    with pytest.raises(kcsi.InvalidArgument) as e:
        kcsi.Host({"nodeName": "n", "rootDir": "var/lib/kubelet"})
    assert "rootDir" in e.value.message


def test_host_config_rejects_unknown_feature_gate(tmp_path):
    with pytest.raises(kcsi.InvalidArgument) as e:
        kcsi.Host({"nodeName": "n", "rootDir": str(tmp_path), "featureGates": {"NoSuchGate": True}})
    assert "NoSuchGate" in e.value.message


@pytest.mark.parametrize("timeout", [0, -1, 1e9])
def test_host_config_rejects_bad_timeout(tmp_path, timeout):
    with pytest.raises(kcsi.InvalidArgument) as e:
        kcsi.Host({"nodeName": "n", "rootDir": str(tmp_path), "timeoutSeconds": timeout})
    assert "timeoutSeconds" in e.value.message


def test_host_config_rejects_malformed_json():
    with pytest.raises(kcsi.InvalidArgument) as e:
        kcsi.Host('{"nodeName": "n",')
    assert e.value.error_class == kcsi.KCSI_CLASS_FINAL


def test_host_status_reports_standalone_state(host):
    st = host.status()
    assert st["standalone"] is True
    assert st["csiNodeInitialized"] is False  # no API server: no CSINode to initialize
    assert st["lastError"] is None
    assert st["drivers"] == []
