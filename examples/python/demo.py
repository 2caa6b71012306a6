"""kcsi's demo: a node agent built on libkcsi (through the Python binding) meets the real
csi-driver-host-path and the real node-driver-registrar, laid out as a DaemonSet would, and
takes one volume through its whole life on the node.

Run by scripts/demo.sh (make demo), which passes the peers' paths and the work dir and
cleans up mounts and processes even if this script dies:
    demo.py <work dir> <hostpathplugin> <csi-node-driver-registrar> <kcsi command>
Every process this script starts is recorded in <work dir>/pids.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import kcsi

DRIVER = "hostpath.csi.k8s.io"
NODE = "demo-node"
POD_UID = "6f1d3b8e-0d5c-4c1e-9a57-00000000d3e0"


def step(what, did, started):
    print(f"[{(time.monotonic() - started) * 1000:8.1f} ms] {what}")
    for line in did:
        print(f"{'':14}{line}")


def timed(fn):
    t = time.monotonic()
    result = fn()
    return result, time.monotonic() - t


def wait(what, ok, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = ok()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}")
        time.sleep(0.002)


def spawn(work, log_name, argv):
    log = open(os.path.join(work, log_name), "w")
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    with open(os.path.join(work, "pids"), "a") as f:
        f.write(f"{p.pid}\n")
    return p


def listening(path):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def main(work, hostpath_bin, registrar_bin, kcsi_bin):
    root = os.path.join(work, "kubelet")
    registry = os.path.join(root, "plugins_registry")
    plugin_dir = os.path.join(root, "plugins", DRIVER)
    os.makedirs(plugin_dir)
    driver_sock = os.path.join(plugin_dir, "csi.sock")
    state_dir = os.path.join(plugin_dir, "state")
    t0 = time.monotonic()

    print(f"kcsi {kcsi.version()} demo: kubelet root {root}\n")
    config = {
        "nodeName": NODE, "rootDir": root, "pluginWatcher": True,
        # Standalone: this CSIDriver stands in for the API server's object.
        "csiDrivers": [{"metadata": {"name": DRIVER},
                        "spec": {"attachRequired": False, "podInfoOnMount": True}}],
    }
    host, took = timed(lambda: kcsi.Host(config))
    step("kcsi_host_new with \"pluginWatcher\": true", [
        f"watching {registry} with inotify ({took * 1000:.1f} ms)"], t0)

    driver = spawn(work, "hostpathplugin.log", [
        hostpath_bin, f"--endpoint=unix://{driver_sock}", f"--nodeid={NODE}",
        f"--statedir={state_dir}", f"--drivername={DRIVER}", "--maxvolumespernode=16"])
    wait("the driver socket", lambda: listening(driver_sock))
    step("the real hostpathplugin listens", [driver_sock], t0)

    registrar = spawn(work, "registrar.log", [
        registrar_bin, f"--csi-address={driver_sock}",
        f"--kubelet-registration-path={driver_sock}", f"--plugin-registration-path={registry}"])
    reg_sock = os.path.join(registry, f"{DRIVER}-reg.sock")
    created = wait("the registration socket", lambda: os.path.exists(reg_sock) and time.monotonic())

    def registered():
        for s in host.status()["pluginWatcher"]["sockets"]:
            if s["path"] == reg_sock and s["state"] == "registered":
                return s
        return None
    sock_state = wait("the watcher to register the driver", registered)
    took = time.monotonic() - created
    d = host.list_drivers()[0]
    step("the plugin watcher picked the driver up", [
        f"inotify: {reg_sock} created by the real node-driver-registrar",
        f"GetInfo -> CSIPlugin {sock_state['driver']} at {sock_state['endpoint']}",
        f"ValidatePlugin + RegisterPlugin -> NodeGetInfo: node id {d['nodeId']}, "
        f"max volumes {d['maxVolumesPerNode']}, topology {json.dumps(d['topology'])}",
        "NotifyRegistrationStatus(registered=true)",
        f"socket creation -> registered: {took * 1000:.1f} ms"], t0)

    handle = subprocess.run([kcsi_bin, "create-volume", f"--endpoint={driver_sock}",
                             "--name=demo-pv", "--size=64Mi"],
                            check=True, capture_output=True, text=True).stdout.strip()
    step("kcsi create-volume: CreateVolume, the provisioner's job, not the kubelet's", [
        f"volume handle {handle}"], t0)

    spec = {"persistentVolume": {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "demo-pv"},
        "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "64Mi"},
                 "volumeMode": "Filesystem", "csi": {"driver": DRIVER, "volumeHandle": handle}}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "demo-pod", "namespace": "default", "uid": POD_UID},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}

    attacher = host.attacher()
    staging = attacher.device_mount_path(spec)
    _, took = timed(lambda: attacher.mount_device(spec, staging, None))
    step("stage: kcsi_attacher_mount_device", [
        f"NodeStageVolume -> {staging} ({took * 1000:.1f} ms)"], t0)

    mounter = host.mounter(spec, pod)
    target = mounter.path()
    _, took = timed(lambda: mounter.set_up(None))
    step("publish: kcsi_mounter_set_up", [
        f"NodePublishVolume -> {target} ({took * 1000:.1f} ms)",
        "vol_data.json written beside it; the driver bind-mounted its volume there"], t0)

    note = os.path.join(target, "hello.txt")
    t = time.monotonic()
    with open(note, "w") as f:
        f.write("written through the pod's path\n")
    with open(os.path.join(state_dir, handle, "hello.txt")) as f:
        back = f.read().strip()
    step("write a file through the pod path and read it back from the driver's volume", [
        f"{note} -> {os.path.join(state_dir, handle, 'hello.txt')}: {back!r} "
        f"({(time.monotonic() - t) * 1000:.1f} ms)"], t0)

    metrics, took = timed(mounter.metrics)
    step("stats: kcsi_mounter_metrics", [
        f"NodeGetVolumeStats: capacity {metrics['capacityBytes']} B, used {metrics['usedBytes']} B, "
        f"available {metrics['availableBytes']} B, inodes {metrics.get('inodes')} "
        f"({took * 1000:.1f} ms)"], t0)
    mounter.close()

    unmounter = host.unmounter("demo-pv", POD_UID)
    _, took = timed(unmounter.tear_down)
    unmounter.close()
    step("unpublish: kcsi_unmounter_tear_down", [
        f"NodeUnpublishVolume({target}); pod volume dir removed: "
        f"{not os.path.exists(os.path.dirname(target))} ({took * 1000:.1f} ms)"], t0)

    _, took = timed(lambda: attacher.unmount_device(staging))
    attacher.close()
    step("unstage: kcsi_attacher_unmount_device", [
        f"NodeUnstageVolume({staging}) ({took * 1000:.1f} ms)"], t0)

    t = time.monotonic()
    registrar.send_signal(signal.SIGTERM)
    registrar.wait(10)
    wait("deregistration", lambda: not host.list_drivers())
    step("the registrar stops (SIGTERM removes its socket)", [
        f"plugin watcher: socket removed -> DeRegisterPlugin ({(time.monotonic() - t) * 1000:.1f} ms); "
        f"drivers now {host.list_drivers()}"], t0)

    host.close()
    driver.send_signal(signal.SIGTERM)
    driver.wait(10)
    step("kcsi_host_free stops the watcher; the driver stops", [], t0)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
