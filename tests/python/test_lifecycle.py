"""A host's view of one volume's life, through libkcsi.so against the real csi-driver-host-path
(real bind mounts): register, publish an ephemeral inline volume, read its metrics, tear it
down with an unmounter made from vol_data.json alone."""
import os

import kcsi
from conftest import HOSTPATH_DRIVER, assert_shape, csi_driver, inline_spec, pod
from mountinfo import mounted


def test_inline_ephemeral_volume_publish_metrics_teardown(needs_root, make_host, hostpath_driver):
    h = make_host(node="node-1", csiDrivers=[csi_driver(
        HOSTPATH_DRIVER, attachRequired=False, podInfoOnMount=True,
        volumeLifecycleModes=["Ephemeral"])])  # podInfoOnMount: kubelet then sends csi.storage.k8s.io/ephemeral=true
    d = hostpath_driver(node_id="node-1")
    h.register_plugin(d.name, d.endpoint, ["1.0.0"], 10_000)
    spec = inline_spec(HOSTPATH_DRIVER, name="scratch")
    p = pod(uid="0b0e2c7e-7a3d-4d4e-9f1a-0000000000aa")
    assert h.can_attach(spec) is False and h.can_device_mount(spec) is False
    with h.mounter(spec, p) as m:
        path = m.path()
        m.set_up()
        assert mounted(path), path
        with open(os.path.join(path, "hello"), "w") as f:
            f.write("hi")
        metrics = m.metrics()
        assert_shape(metrics, kcsi.VolumeMetrics)
        assert metrics["capacityBytes"] > 0 and metrics["usedBytes"] >= 0
    assert os.path.exists(os.path.join(os.path.dirname(path), "vol_data.json"))
    with h.unmounter("scratch", p["metadata"]["uid"]) as u:
        u.tear_down()
    assert not mounted(path)
    assert not os.path.exists(os.path.dirname(path))
