"""The attach/detach controller's calls through the Python binding: refused on a node host (as
upstream's kubelet refuses them), and bad input named on a controller host whose API server
these calls never reach. A real attach and detach is test_attach.py's."""
import os

import pytest

import kcsi
from conftest import HOSTPATH_DRIVER, pv_spec, short_tempdir

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.fixture
def controller():
    d = short_tempdir("kcsi-pyctl")
    path = os.path.join(d, "kubeconfig")
    with open(path, "w") as f:
        f.write(KUBECONFIG)
    h = kcsi.Host({"role": "controller", "kubeconfig": path})
    yield h
    h.close()
    os.unlink(path)
    os.rmdir(d)


def test_controller_role_needs_a_kubeconfig_and_no_node():
    with pytest.raises(kcsi.InvalidArgument, match="kubeconfig"):
        kcsi.Host({"role": "controller"})
    with pytest.raises(kcsi.InvalidArgument, match="nodeName"):
        kcsi.Host({"role": "controller", "kubeconfig": "/k", "nodeName": "n"})


def test_attach_on_a_node_host_is_not_supported(host):
    with host.attacher() as a:
        with pytest.raises(kcsi.NotSupported, match="attaching volumes from the kubelet is not supported"):
            a.attach(pv_spec(HOSTPATH_DRIVER), "node-1", 100)
        with pytest.raises(kcsi.NotSupported, match="kcsi_attacher_detach"):
            a.detach(f"{HOSTPATH_DRIVER}^vol-1", "node-1", 100)
        with pytest.raises(kcsi.NotSupported, match="kcsi_attacher_volumes_are_attached"):
            a.volumes_are_attached([pv_spec(HOSTPATH_DRIVER)], "node-1")


def test_node_calls_on_a_controller_host_are_not_supported_naming_the_call(controller):
    assert controller.status()["role"] == "controller"
    with pytest.raises(kcsi.NotSupported, match="kcsi_register_plugin"):
        controller.register_plugin(HOSTPATH_DRIVER, "/tmp/none.sock", ["1.0.0"], 100)
    with pytest.raises(kcsi.NotSupported, match="kcsi_mounter_new"):
        controller.mounter(pv_spec(HOSTPATH_DRIVER), {"metadata": {"uid": "u1"}})
    with controller.attacher() as a:
        with pytest.raises(kcsi.NotSupported, match="kcsi_attacher_wait_for_attach"):
            a.wait_for_attach(pv_spec(HOSTPATH_DRIVER), 100)


@pytest.mark.parametrize("call,named", [
    (lambda a: a.attach(pv_spec(HOSTPATH_DRIVER), "", 100), "node_name"),
    (lambda a: a.attach({"volume": {"name": "v", "csi": {"driver": "d"}}}, "n", 100), "CSIPersistentVolumeSource"),
    (lambda a: a.attach({"persistentVolume": {"spec": {}}}, "n", 100), "volume source not found"),
    (lambda a: a.detach("no-caret", "n", 100), "volume_name"),
    (lambda a: a.detach("a^b^c", "n", 100), "volume_name"),
    (lambda a: a.detach("d^h", "", 100), "node_name"),
    (lambda a: a.volumes_are_attached(pv_spec(HOSTPATH_DRIVER), "n"), "specs_json is not a JSON array"),
    (lambda a: a.volumes_are_attached([pv_spec(HOSTPATH_DRIVER), None], "n"), r"specs_json\[1\]"),
    (lambda a: a.volumes_are_attached([pv_spec(HOSTPATH_DRIVER)], ""), "node_name"),
], ids=["attach-empty-node", "attach-inline", "attach-non-csi", "detach-no-caret", "detach-two-carets",
        "detach-empty-node", "are-attached-not-array", "are-attached-null", "are-attached-empty-node"])
def test_controller_calls_name_their_bad_input(controller, call, named):
    with controller.attacher() as a:
        with pytest.raises(kcsi.InvalidArgument, match=named):
            call(a)


def test_volumes_are_attached_of_no_specs_is_an_empty_list(controller):
    with controller.attacher() as a:
        assert a.volumes_are_attached([], "n") == []
