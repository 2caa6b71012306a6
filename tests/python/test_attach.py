"""A real attach and detach from Python: a controller host's Attacher against a real
kube-apiserver, the real external-attacher and the real hostpath driver started with
-enable-attach. What the test believes comes from the API server (read with its own client) and
from the driver's own log of ControllerPublishVolume / ControllerUnpublishVolume, never from kcsi."""
import hashlib
import os
import subprocess

import kcsi
from conftest import REPO, wait_for

VOLUME_ATTACHMENTS = "/apis/storage.k8s.io/v1/volumeattachments"


def attachment_name(handle, driver, node):
    """Upstream's VolumeAttachment name: csi-<sha256(volume handle + attacher + node name)>."""
    return "csi-" + hashlib.sha256(f"{handle}{driver}{node}".encode()).hexdigest()


def create_volume(driver, name):
    """CreateVolume on the driver (with `kcsi create-volume`, as an external-provisioner would);
    the id is the one the driver's own log shows it answered."""
    cli = os.path.join(REPO, "target", "release", "kcsi")
    r = subprocess.run([cli, "create-volume", f"--endpoint=unix://{driver.socket}", f"--name={name}",
                        "--size=1Mi"], capture_output=True, text=True)
    assert r.returncode == 0, f"kcsi create-volume: {r.stderr}"
    [created] = driver.calls("CreateVolume")
    handle = created["Response"]["volume"]["volume_id"]
    assert r.stdout.strip() == handle, (r.stdout, created)
    return handle


def test_attach_and_detach_go_through_the_real_external_attacher_to_the_driver(
        apiserver, hostpath_driver, peer_process):
    node = f"py-attach-{os.getpid()}"
    driver_name = f"{node}.csi.k8s.io"  # its own name: the external-attacher sees only this test
    created = apiserver.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    driver = hostpath_driver(node_id=node, name=driver_name, extra=["-enable-attach"])
    # The external-attacher finds the driver's node id in the node's CSINode.
    apiserver.create("/apis/storage.k8s.io/v1/csinodes", {
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": node, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": created["metadata"]["uid"]}]},
        "spec": {"drivers": [{"name": driver_name, "nodeID": node}]}})
    peer_process("attacher", [f"--csi-address={driver.socket}", f"--kubeconfig={apiserver.kubeconfig}",
                              "--timeout=30s", "--v=5"], os.path.join(driver.dir, "external-attacher.log"))
    handle = create_volume(driver, "py-att1")
    pv_name = f"pv-{node}"
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
          "spec": {"capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
                   "csi": {"driver": driver_name, "volumeHandle": handle}}}
    apiserver.create("/api/v1/persistentvolumes", pv)
    spec = {"persistentVolume": pv}
    va_path = f"{VOLUME_ATTACHMENTS}/{attachment_name(handle, driver_name, node)}"

    with kcsi.Host({"role": "controller", "kubeconfig": apiserver.kubeconfig}) as host, host.attacher() as a:
        wait_for("the controller host's VolumeAttachment and CSIDriver watches synced", 30,
                 lambda: host.status()["volumeAttachmentsSynced"] and host.status()["csiDriversSynced"])
        assert driver.requests("ControllerPublishVolume") == []

        name = a.attach(spec, node, 60_000)
        va = apiserver.get(va_path)
        assert va is not None, f"attach returned {name!r} but the API server has no {va_path}"
        assert name == va["metadata"]["name"]
        assert va["spec"] == {"attacher": driver_name, "nodeName": node, "source": {"persistentVolumeName": pv_name}}
        assert va["status"]["attached"] is True, va["status"]
        publishes = driver.requests("ControllerPublishVolume")
        assert publishes and all((p["volume_id"], p["node_id"]) == (handle, node) for p in publishes), publishes
        assert a.volumes_are_attached([spec], node) == [True]

        a.detach(f"{driver_name}^{handle}", node, 60_000)
        assert apiserver.get(va_path) is None, "the VolumeAttachment is still there after detach"
        unpublishes = driver.requests("ControllerUnpublishVolume")
        assert unpublishes and all((u["volume_id"], u["node_id"]) == (handle, node) for u in unpublishes), unpublishes
        assert a.volumes_are_attached([spec], node) == [False]
