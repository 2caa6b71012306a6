"""The plugin watcher from Python: the config key turns it on, and the real node-driver-registrar
in front of the real hostpath driver registers the driver; stopping the registrar deregisters."""
import os
import signal
import subprocess

import kcsi
from conftest import HOSTPATH_DRIVER, assert_shape, peer_binary, wait_for


def watcher_socket(h, path):
    for s in h.status()["pluginWatcher"]["sockets"]:
        if s["path"] == path:
            return s
    return None


def test_plugin_watcher_registers_the_real_registrars_driver(make_host):
    h = make_host(node="py-node", pluginWatcher=True)
    registry = os.path.join(h.root, "plugins_registry")
    assert h.status()["pluginWatcher"]["dir"] == registry
    plugin_dir = os.path.join(h.root, "plugins", HOSTPATH_DRIVER)
    os.makedirs(plugin_dir)
    sock = os.path.join(plugin_dir, "csi.sock")
    procs = []
    try:
        with open(os.path.join(plugin_dir, "driver.log"), "w") as log:
            procs.append(subprocess.Popen(
                [peer_binary("hostpath"), f"--endpoint=unix://{sock}", "--nodeid=py-node",
                 f"--statedir={plugin_dir}/state", f"--drivername={HOSTPATH_DRIVER}"],
                stdout=log, stderr=log))
        wait_for("driver socket", 20, lambda: os.path.exists(sock), procs[0])
        with open(os.path.join(plugin_dir, "registrar.log"), "w") as log:
            procs.append(subprocess.Popen(
                [peer_binary("registrar"), f"--csi-address={sock}",
                 f"--kubelet-registration-path={sock}", f"--plugin-registration-path={registry}"],
                stdout=log, stderr=log))
        reg_sock = os.path.join(registry, f"{HOSTPATH_DRIVER}-reg.sock")
        wait_for("registered", 20,
                 lambda: (watcher_socket(h, reg_sock) or {}).get("state") == "registered")
        [d] = h.list_drivers()
        assert d["name"] == HOSTPATH_DRIVER and d["nodeId"] == "py-node"
        status = h.status()
        assert_shape(status, kcsi.HostStatus)
        assert status["drivers"] == [d] and status["pluginWatcher"]["sockets"]

        procs[1].send_signal(signal.SIGTERM)
        procs[1].wait(10)
        wait_for("deregistered", 20, lambda: not h.list_drivers())
        assert watcher_socket(h, reg_sock) is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)


def test_plugin_watcher_is_off_without_the_key(make_host):
    h = make_host(node="py-off")
    assert h.status()["pluginWatcher"] is None
    assert not os.path.exists(os.path.join(h.root, "plugins_registry"))
